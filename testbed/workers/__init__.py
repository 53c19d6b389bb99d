"""Processes inside emulated hosts (prefill, decode, router, load, background)."""
