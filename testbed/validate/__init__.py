"""Packet-vs-flow comparison: the math (compare.py) and the flow-model replay (replay.py)."""
