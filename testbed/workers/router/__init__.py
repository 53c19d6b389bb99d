"""The router process of an emulated run: the scheduler service and what it watches.

service         the router: requests placed, KV pushes ordered, the run's end decided
control_link    workers connecting and closing, messages dispatched, heartbeats
network_view    the oracle fetched from the controller, its age, the live view
failures        missed heartbeats declaring a decode instance dead, the fault schedule
fault_state     what the failure detector has seen; link and ToR failures made real
role_switching  FlowKV-LA's role switching on packets
run_result      when the run is done, and the records it leaves
"""
