"""The paper's equations and the scheduler logic.

Both engines (flow simulator and emulated router) import from here; every equation
lives in exactly one function named after what it computes. The modules here are pure:
no I/O, no clock, no threads (tests/test_layers.py holds them to it). What the model
takes from outside lives in one room.

kv              KV-cache size (eq. 1) and the effective transfer after a prefix hit (eq. 2)
timing          t_iter(beta) and T_prefill(l)
cost            the network and queueing cost (eqs. 3, 4, 6, 7)
loadgrid        a scheduler's load term on a grid, for thousands of candidates
congestion      utilisation and per-tier congestion from class byte counters
oracle          the network cost oracle: what the operator tells the scheduler
inflight        NetKV's self-contention counter (n_inflight of eq. 4)
candidates      what a router knows of each decode instance when it places a request
cache           per-instance prefix caches: longest common prefix, LRU, memory
scheduler_base  what every scheduler shares: records, Algorithm 1's memory feasibility
schedulers      RR, LA, CA, CLA* and the NetKV ablation ladder (Algorithm 1)
follow          decisions taken elsewhere, taken again
recovery        KVRS: recompute or migrate after a decode instance fails
mfs             MFS's priority levels for KV flows
reuse           KV-reuse retrieval, MFS's first stage
flowkv          FlowKV's load-aware scheduler
granularity     how many send calls a KV transfer takes (FlowKV)
tcp             what TCP does to a transfer that a fluid rate does not
extensions/     schedulers and network models loaded by name (plugins, network_models),
                run under a deadline (guard: SIGALRM, threads), and the prefix cache
                compiled to native code (compiled_cache)
"""
