"""The engines' common ground: the control plane, written once for the flow engine, ns-3's
run and the emulation's router; and the flow simulator's seam with the network it drives.

plane         the router's decisions over a request's life, through an `Engine`
roles         FlowKV-LA role switching: the cycle both engines share
network_seam  what the flow simulator does to its network, whichever engine it is
"""
