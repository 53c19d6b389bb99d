"""The emulation engine: a scenario's cells on Mininet, Open vSwitch and Linux TCP.

orchestrator   `testbed emulate`: cells on packets, in the shared run-record format
net            the fabric up and, on every path out, down again
ovs/           Open vSwitch: the system's daemons or private ones (its own room)
multi_machine  one fabric across several machines (Mininet's cluster edition)
servers        a point's seeds spread over servers through Dask
lanes, lane    several fabrics side by side on one machine
processes      one run's worker processes started, awaited and stopped
child, hosts   children die with the orchestrator; is a host still there
hooks          what the caller of a run hears and decides
fidelity       the run sampled while it goes on (backlogs, counters, CPU)
judge          is a run faithful: the judgement of what fidelity sampled
ingress        did the machine drop or hold packets before the fabric queued them
threads        per-thread CPU of the datapath and the workers
spans          spans of time (pure)
readback       what the kernel applied, read back: the replica ns-3's twin must build
capture        packet captures of chosen links, for Wireshark
cleanup        find and remove what runs left behind (`testbed clean`)
"""
