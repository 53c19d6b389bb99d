"""The flow engine: one run of a scenario cell, its KV transfers as fluid flows.

simulator         one run: set-up, arrivals, the control plane's engine calls, records
transfers         a decision's P2D transfer as shard flows, MFS levels, flows finishing
pair_lanes        the Transfer Engine's lanes: a pair's shards on its connections, or waiting
reuse_fetch       KV-reuse prefix hits and the fetch flow that brings one to the prefill
faults            the scenario's fault schedule: links, decode instances, the controller
telemetry         background offered per link, the oracle's refresh, links.csv samples
flowkv_control    FlowKV-LA's role switching as the simulator reads and applies it
events            the discrete-event loop, and the one that drives a packet simulator
network           the fluid network (a SimulatedNetwork): flows' lifecycle and time
links             what it is made of: directed links with byte counters, flows
paths             ECMP path choice and a path's base round trip
conditions        link faults, background fractions, priority levels, tier congestion
ramp              the TCP model: handshake, slow start, seniority, joining a busy path
sharing           max-min fair rates, re-shared incrementally or by component
fill              weighted progressive filling, the step every re-sharing ends in
compiled_sharing  the same sharing compiled (native/maxmin.cc), wherever it builds
model_network     the network a run gets; a network model's rates in place of max-min
"""
