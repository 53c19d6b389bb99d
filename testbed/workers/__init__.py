"""Processes inside emulated hosts: `python -m testbed.workers ROLE CONFIG [INSTANCE]`.

router/        the scheduler service of a run (its own room)
worker         what every worker process shares: connect, hello, start, leave
prefill        a FIFO GPU that computes T_prefill(l), then pushes the KV cache
decode         receives KV shard streams and runs its decode engine
decode_engine  continuous batching on real time, KV landing, reports
loadgen        replays the scenario's workload at the router
background     best-effort TCP flows at an offered load per tier
probe          calibration probes: lone KV transfers timed end to end
push           one request's KV pushed to its decode instance
kvstream       KV transfers as real TCP byte streams, a connection per TP shard
transfer_engine  KV through Mooncake's Transfer Engine instead (kv_transport: mooncake)
levels         priority levels at a sending worker (MFS), per layer chunk
tcpinfo        why a KV stream was slow: the sender's TCP_INFO
engine_tcp     the same for the Transfer Engine's connections, read by descriptor
protocol       framed JSON control messages and the KV stream header
channel        control channels between router and workers
config         what every worker of one run reads (written once)
realtime       an event loop on the run's clock
lateness       how late a worker woke for its timers
journal        what a run has finished, on disk as it finishes
"""
