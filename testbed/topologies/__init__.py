"""Fabric descriptions, derived once from the scenario's fat-tree (pure but for Mininet's
topology class).

fattree          the fat-tree spec: pods, racks, servers, GPUs, instances, tiers, links
tiers            tau(src, dst) for many pairs at once
fabric           the emulated fabric: switches, DPIDs, ports, addresses, rates
replica          what the scaled replica does to bytes, buffers and timers (both packet engines)
routing          forwarding decisions: what each `network.ecmp` mode means
traffic_classes  DSCP code points, their HTB classes and shares
placement        which Open vSwitch daemon forwards which switch
captured         which link directions a capture names
mininet_topo     the Mininet topology built from the fabric
"""
