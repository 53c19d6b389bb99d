"""A validation end to end, per packet engine.

pipeline         `testbed validate --packets emulation`: emulation against the flow model
sequential_plan  the emulation's sequential plan and looks
ns3_pipeline     `--packets ns3`: ns-3 against the flow model
ns3_rounds       ns-3's seeds until the claims are conclusive
ns3_looks        one look of ns-3's rounds: the claims the stop reads
three_way        `--packets both`: emulation, ns-3 and the flow model, one verdict
twin_rounds      ns-3 twin runs beside each emulation seed, planned from the first
flow_models      other network models judged against the same packets
judge_folder     `testbed judge FOLDER`: a finished validation judged again
"""
