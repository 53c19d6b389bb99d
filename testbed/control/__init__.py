"""The control plane, written once for both engines (testbed/control/plane.py)."""
