"""netkv-testbed: flow-level simulator and packet-level emulation of NetKV."""
