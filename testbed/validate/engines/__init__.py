"""The engines and probes a validation drives.

fabric_probes  `testbed calibrate`: lone and competing KV probes on the emulated fabric
ns3_probes     the same probes on ns-3
contention     the competing probes through the flow model, and the terms fitted on them
flow_match     the flow model's matched scenario of a packet run (`flow_scenario`)
flow_replay    the flow model fed a run's own transfers
ns3_replay     ns-3 fed the emulation's own schedule (`testbed replay`)
repeat         packets against packets: repeated runs of one cell (`testbed repeat`)
machine_cache  what a validation keeps on this machine: calibration, phase times
ns3_cost       what ns-3's first round will cost, refused past the budget
"""
