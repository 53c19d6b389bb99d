"""Packet-level emulation: Mininet fabric, tc ownership, cleanup, fidelity."""
