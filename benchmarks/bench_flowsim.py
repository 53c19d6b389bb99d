"""Flow-simulator speed: figures, not assertions (these machines are noisy).

Targets on the 2-core development machine:
  - whole shipped trace compressed to 100% load, 64 GPUs: under 2 s wall (was 10 s)
  - a 20 s run (5 s warm-up + 15 s measurement) at 1024 GPUs: under 60 s wall
  - one scheduler decision over 12 candidates: median under 50 us (paper: under 1.5 ms)
  - peak memory of each run

Largest fabrics and the whole paper (targets on the 2-core machine):
  - `--only largest`: 65,536 GPUs (the scenario bound) x 60 s, CLA* and NetKV-Full, each in
    a fresh process: under 3 minutes within 8 GB per scheduler
  - `--only decision-largest`: NetKV-Full's decision over every decode instance of a
    65,536-GPU fabric (12,288 candidates): median < 50 us, over one table asked again and
    again, and over a new table each time, made by a decode board as the simulator's (as
    many rows holding the request's prefix as a run has, and a quarter of the rows)
  - `--only paper [--jobs N|auto]`: every shipped experiment scenario (scenarios/exp*.yaml)
    at its own seeds, every cell and scheduler, as `testbed simulate scenarios/exp*.yaml
    --jobs N` runs them (records written): under 60 s in all

Scale curve (`--only scale`): 64 to 8192 GPUs (exp7's fat-tree, 32 GPUs a pod) x 15 and
60 s measured (the shipped trace looped at 100% load), CLA* and NetKV-Full; each run in a
fresh process, so its peak resident memory is its own: wall, events/s, peak RSS, printed
as a table and plotted to benchmarks/out/flowsim_scale.png, with wall milliseconds per
simulated request (events count coalesced decode iterations as one, so they are not the
same unit of work at every scale). Targets: 1024 GPUs x 60 s under 10 s for every
scheduler, 8192 GPUs x 60 s under 10 s, events/s at 1024 GPUs within 2x of 64 GPUs.

Every mode first and last times a yardstick: a fixed piece of interpreter work of the
re-sharing's kind (best of five). This machine's speed drifts by up to 1.5x between hours
with the same code, so the scale curve, the largest runs and the whole paper also print
wall / yardstick, the figure to compare across hours and days.

Run: .venv/bin/python benchmarks/bench_flowsim.py [--skip-1024]
     [--only trace|1024|decision|decision-largest|scale|largest|paper]
     [--gpus 64,256,1024] [--measure 15,60]
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import time
import tracemalloc
from pathlib import Path

import numpy as np

from testbed.flowsim.simulator import simulate
from testbed.model.cache import PrefixCache, full_block_count
from testbed.model.kv import MODEL_PRESETS, kv_bytes_per_token, kv_cache_bytes
from testbed.model.schedulers import SCHEDULERS, Candidate, RequestInfo, SchedulerContext, make_scheduler
from testbed.model.timing import TimingModel
from testbed.scenario import Scenario
from testbed.topologies.fattree import FatTreeSpec
from testbed.workloads.build import build_workload
from testbed.workloads.mooncake import read_trace

ROOT = Path(__file__).resolve().parent.parent
TRACE = str(ROOT / "data" / "traces" / "mooncake_synthetic_trace.jsonl")


def yardstick_s(repeats: int = 5) -> float:
    """Seconds this machine takes, best of `repeats`, for a fixed piece of interpreter
    work of the re-sharing's kind (a path's residuals in a dict, rates in a list, set
    membership, a heap). The 2-core machine's speed drifts by up to 1.5x from hour to
    hour, so a wall time divided by this is the figure that compares across hours."""
    import heapq

    rng = random.Random(1)
    n_links, n_flows = 4096, 2048
    paths = [tuple(rng.randrange(n_links) for _ in range(6)) for _ in range(n_flows)]
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        rate = [0.0] * n_links
        members: list[set[int]] = [set() for _ in range(n_links)]
        heap: list[tuple[float, int]] = []
        for step in range(200_000):
            fid = step % n_flows
            path = paths[fid]
            residual = {h: 1.0 - rate[h] for h in path}
            unit = min(residual.values()) * 0.5
            for h in path:
                rate[h] += unit * 1e-3
                members[h].add(fid)
            heapq.heappush(heap, (unit, fid))
            if len(heap) > 512:
                heapq.heappop(heap)
            if step % 3 == 0:
                for h in path:
                    members[h].discard(fid)
        best = min(best, time.perf_counter() - t0)
    return best


def print_yardstick(when: str) -> float:
    ref = yardstick_s()
    print(f"yardstick ({when}): {ref:.3f} s of fixed interpreter work (wall / yardstick "
          f"compares hours)", flush=True)
    return ref


def timed_run(scenario: Scenario, key: str) -> tuple[float, float, int, int]:
    """Wall seconds, peak traced MB, events and requests of one simulation.

    Timed without tracing (tracemalloc slows Python several-fold); a second, traced run
    of the same simulation gives the peak memory.
    """
    workload = build_workload(scenario, 1)
    t0 = time.perf_counter()
    result = simulate(scenario, key, 1, workload)
    wall = time.perf_counter() - t0
    tracemalloc.start()
    simulate(scenario, key, 1, workload)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return wall, peak / 2**20, result.events, len(workload.requests)


def whole_trace_64() -> None:
    trace = read_trace(TRACE)
    base = Scenario(name="bench", workload={"trace": TRACE, "profile": "all", "prewarm": False,
                                            "trace_offset_s": 0.0, "warmup_s": 0.0,
                                            "measure_s": 1.0})
    wl = build_workload(base, 1)
    duration = (len(trace) - 1) / wl.rate_rps  # the whole trace, compressed
    sc = base.with_overrides({"workload.measure_s": duration})
    for key in ("cla", "netkv-full"):
        wall, peak, events, n = timed_run(sc, key)
        print(f"whole trace, 64 GPUs, 100% load ({n} requests, {duration:.0f} simulated s), "
              f"{SCHEDULERS[key]}: {wall:.2f} s wall (target < 2 s), {events} events, "
              f"peak {peak:.0f} MB traced")


def run_1024() -> None:
    sc = Scenario(name="bench", workload={"trace": TRACE}, cluster={"pods": 32})
    for key in ("cla", "netkv-full"):
        wall, peak, events, n = timed_run(sc, key)
        print(f"1024 GPUs, 20 s RAG at 100% load ({n} requests), {SCHEDULERS[key]}: "
              f"{wall:.2f} s wall (target < 60 s), {events} events, peak {peak:.0f} MB traced")


def decision_latency(candidates: int = 12, trials: int = 20000) -> None:
    model = MODEL_PRESETS["llama-3-70b"]
    ctx = SchedulerContext(TimingModel(), beta_max=64, memory_reserve_bytes=2e9)
    spec = FatTreeSpec()
    from testbed.model.oracle import Oracle

    oracle = Oracle(dict(spec.tier_map), spec.tier_bandwidth_gbps, spec.tier_latency_us,
                    {2: 0.1, 3: 0.2})
    decode = [d.name for d in spec.decode_pool][:candidates]
    rng = random.Random(1)
    reqs = [RequestInfo(f"r{i}", n, kv_cache_bytes(model, n))
            for i, n in enumerate(rng.randint(4096, 65536) for _ in range(256))]
    cands = [[Candidate(d, rng.uniform(20e9, 180e9), rng.randint(0, 8), rng.randint(0, 64),
                        rng.randint(0, r.input_len // 16) * 16) for d in decode] for r in reqs]
    # the same reports as the flow simulator hands them over: a table of its decode board
    from testbed.serving import DecodeBoard

    board = DecodeBoard(ctx.beta_max)
    for _ in decode:
        board.slot()
    names, index = tuple(decode), {d: i for i, d in enumerate(decode)}

    def table(listed: list[Candidate]):
        for slot, c in enumerate(listed):
            board.publish(slot, c.free_memory, c.queued, c.batch)
        hit = np.array([c.hit_tokens for c in listed], dtype=np.int64)
        return board.table(names, slice(0, len(names)), hit, index, np.flatnonzero(hit))

    print(f"scheduler decision over {candidates} candidates (hit lengths precomputed), as a "
          "list and as a table the flow simulator hands over:")
    for key in SCHEDULERS:
        medians = []
        for as_table in (False, True):
            sched = make_scheduler(key, ctx)
            samples = []
            for i in range(trials):
                r, c = reqs[i % len(reqs)], cands[i % len(cands)]
                asked = table(c) if as_table else c
                t0 = time.perf_counter()
                d = sched.select(r, "i0", asked, oracle)
                samples.append((time.perf_counter() - t0) * 1e6)
                if not d.rejected:
                    sched.transfer_done("i0", d.tier)
            samples.sort()
            medians.append(f"median {statistics.median(samples):6.1f} us, "
                           f"p99 {samples[int(0.99 * len(samples))]:6.1f} us")
        print(f"  {SCHEDULERS[key]:16} list: {medians[0]}; table: {medians[1]} "
              "(target median < 50 us)")
    # the prefix lookup a real router adds: LCP of a RAG request against 12 warm caches
    trace = [r for r in read_trace(TRACE) if 4096 <= r.input_len <= 65536]
    caches = [PrefixCache(16, kv_bytes_per_token(model) * 16) for _ in decode]
    for k, r in enumerate(trace[:600]):
        caches[k % len(caches)].pin(r.hash_ids, full_block_count(r.input_len, 16))
    samples = []
    for r in trace[600:1600]:
        t0 = time.perf_counter()
        for cache in caches:
            cache.prefix_hit_tokens(r.hash_ids, r.input_len)
        samples.append((time.perf_counter() - t0) * 1e6)
    print(f"  + block LCP over {candidates} caches (16-token blocks): median "
          f"{statistics.median(samples):.1f} us per decision")


# Rows holding a request's cached prefix in a run at this scale (counted per decision,
# NetKV-Full: 65,536 GPUs x 5 s, median 0, p90 0, most 5; 8192 x 15 s: median 0, p90 1,
# most 4): the table "as in a run" gives the most, the dense one a quarter of all rows.
RUN_HIT_ROWS = 5


def decision_largest(gpus: int = 65536, trials: int = 2000) -> None:
    """NetKV-Full (and CLA*) over every decode instance of the largest fabric, the table
    made by a decode board as the flow simulator's (columns copied, load keys and their
    census given; made outside the timing): one table asked again and again (what is
    derived per table paid once), and a new one at every decision, with as many rows
    holding the request's prefix as a run has and with a quarter of them (past FEW
    cached rows NetKV makes a pass over the table); the oracle's lazy tier map, rows
    cached per prefill."""
    from testbed.model.oracle import Oracle
    from testbed.serving import DecodeBoard

    model = MODEL_PRESETS["llama-3-70b"]
    spec = FatTreeSpec(pods=gpus // 32)
    ctx = SchedulerContext(TimingModel(), beta_max=64, memory_reserve_bytes=2e9)
    oracle = Oracle(spec.tier_map, spec.tier_bandwidth_gbps, spec.tier_latency_us,
                    {2: 0.1, 3: 0.2})
    names = tuple(d.name for d in spec.decode_pool)  # the simulator keeps one tuple
    prefill = [p.name for p in spec.prefill_pool]
    rng = random.Random(1)
    n = len(names)
    board = DecodeBoard(ctx.beta_max)
    for slot in range(n):
        board.slot()
        board.publish(slot, rng.uniform(20e9, 180e9), rng.randint(0, 8), rng.randint(0, 64))
    reqs = [RequestInfo(f"r{i}", k, kv_cache_bytes(model, k))
            for i, k in enumerate(rng.randint(4096, 65536) for _ in range(256))]
    index = {name: i for i, name in enumerate(names)}
    few = np.zeros(n, dtype=np.int64)
    few[rng.sample(range(n), RUN_HIT_ROWS)] = 1024
    dense = np.array([rng.choice((0, 0, 0, 1024)) for _ in range(n)], dtype=np.int64)

    def new_table(hit_tokens):  # a CandidateTable, as the simulator hands one over
        return board.table(names, slice(0, n), hit_tokens.copy(), index,
                           np.flatnonzero(hit_tokens))  # the hit rows from its index

    cases = [(f"one table, {RUN_HIT_ROWS} rows cached", new_table(few), None),
             (f"a new table each time, {RUN_HIT_ROWS} rows cached, as in a run", None, few),
             ("a new table each time, a quarter of rows cached", None, dense)]
    for key in ("netkv-full", "cla"):
        for what, table, hit_tokens in cases:
            sched = make_scheduler(key, ctx)
            samples = []
            for i in range(trials):
                src = prefill[i % 64]  # rows are cached per prefill, as in a run
                asked = table if hit_tokens is None else new_table(hit_tokens)
                t0 = time.perf_counter()
                d = sched.select(reqs[i % len(reqs)], src, asked, oracle)
                samples.append((time.perf_counter() - t0) * 1e6)
                if not d.rejected:
                    sched.transfer_done(src, d.tier)
            samples.sort()
            print(f"decision over {n} candidates ({spec.n_gpus} GPUs), {SCHEDULERS[key]}, "
                  f"{what}: median {statistics.median(samples):.0f} us, p99 "
                  f"{samples[int(0.99 * trials)]:.0f} us (target median < 50 us)")


def whole_paper(jobs: int | str, ref: float) -> None:
    """Every shipped experiment at its own seeds, as `testbed simulate scenarios/exp*.yaml
    --jobs J` runs them: one call, records written (to a temporary folder), a wall per
    scenario and in all, with the CPU time of this process and its workers."""
    import os
    import tempfile

    from testbed.api import load_scenario, simulate_all

    paths = sorted((ROOT / "scenarios").glob("exp*.yaml"))
    scenarios = [load_scenario(p) for p in paths]
    cpu0 = os.times()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        runs = simulate_all(scenarios, out, jobs=jobs)
    wall = time.perf_counter() - t0
    cpu1 = os.times()
    cpu = sum(b - a for a, b in zip(cpu0[:4], cpu1[:4], strict=True))
    for path, run in zip(paths, runs, strict=True):
        lost = f", {len(run.outcome.lost)} LOST" if run.outcome.lost else ""
        print(f"{path.stem:22} {sum(len(c.schedulers) * c.seeds for _, c in run.scenario.points()):4} "
              f"runs {run.outcome.wall_s:6.1f} s{lost}")
    n = sum(len(c.schedulers) * c.seeds for sc in scenarios for _, c in sc.points())
    print(f"whole paper (every exp*.yaml, own seeds, {n} runs, records written) on "
          f"{runs[0].executor}: {wall:.1f} s wall, {cpu:.1f} s CPU (target < 60 s), "
          f"{wall / ref:.0f} yardsticks")


def largest(measure: int, ref: float) -> None:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    for key in ("cla", "netkv-full"):
        with ctx.Pool(1, maxtasksperchild=1) as pool:
            r = pool.apply(_scale_cell, ((65536, measure, key),))
        print(f"{r['gpus']} GPUs x {measure} s, {SCHEDULERS[key]}: {r['requests']} requests, "
              f"{r['wall']:.1f} s wall (target < 180 s; {r['wall'] / ref:.0f} yardsticks), "
              f"peak RSS {r['rss_mb']:.0f} MB "
              f"(target < 8192 MB)", flush=True)


def _scale_cell(args) -> dict:
    """One scale-curve run (in its own process): wall, events, requests, peak RSS."""
    gpus, measure, key = args
    sc = Scenario(name="bench-scale", workload={"trace": TRACE, "trace_loop": True,
                                                "measure_s": float(measure)},
                  cluster={"pods": max(1, gpus // 32)})
    workload = build_workload(sc, 1)
    t0 = time.perf_counter()
    result = simulate(sc, key, 1, workload)
    wall = time.perf_counter() - t0
    return {"gpus": sc.cluster.spec().n_gpus, "measure": measure, "key": key, "wall": wall,
            "events": result.events, "requests": len(workload.requests),
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def scale_curve(gpus: list[int], measures: list[int], ref: float) -> None:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    rows = []
    print("| GPUs | measured s | scheduler | requests | events | wall s | wall / yardstick | "
          "events/s | ms/request | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in gpus:
        for m in measures:
            for key in ("cla", "netkv-full"):
                with ctx.Pool(1, maxtasksperchild=1) as pool:
                    r = pool.apply(_scale_cell, ((n, m, key),))
                rows.append(r)
                print(f"| {r['gpus']} | {m} | {SCHEDULERS[key]} | {r['requests']} | "
                      f"{r['events']} | {r['wall']:.1f} | {r['wall'] / ref:.1f} | "
                      f"{r['events'] / r['wall']:.0f} | "
                      f"{1e3 * r['wall'] / r['requests']:.2f} | {r['rss_mb']:.0f} |", flush=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b, c) = plt.subplots(1, 3, figsize=(14, 4))
    for key in ("cla", "netkv-full"):
        for m in measures:
            pts = [r for r in rows if r["key"] == key and r["measure"] == m]
            label = f"{SCHEDULERS[key]}, {m} s"
            gpus = [r["gpus"] for r in pts]
            a.plot(gpus, [r["wall"] for r in pts], "o-", label=label)
            b.plot(gpus, [r["events"] / r["wall"] for r in pts], "o-", label=label)
            c.plot(gpus, [1e3 * r["wall"] / r["requests"] for r in pts], "o-", label=label)
    # events/s alone misleads across scales: a decode instance's quiet iterations are one
    # event, so wall time per simulated request is the like-for-like figure
    for ax, title in ((a, "wall (s)"), (b, "events / s"), (c, "wall ms per request")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("GPUs")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    a.legend(fontsize=8)
    out = ROOT / "benchmarks" / "out" / "flowsim_scale.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"plot: {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-1024", action="store_true", help="skip the 1024-GPU run")
    parser.add_argument("--only", choices=["trace", "1024", "decision", "decision-largest",
                                           "scale", "largest", "paper"])
    parser.add_argument("--gpus", default="64,256,1024,4096,8192",
                        help="scale curve sizes (GPUs, multiples of 32)")
    parser.add_argument("--measure", default="15,60", help="scale curve measured seconds")
    parser.add_argument("--jobs", default="1", type=lambda v: v if v == "auto" else int(v),
                        help="--only paper: processes the cells are handed to (1: this one; "
                             "auto: as `testbed simulate` chooses)")
    args = parser.parse_args()
    ref = print_yardstick("before")
    run(args, ref)
    print_yardstick("after")  # how far the machine drifted during the run


def run(args, ref: float) -> None:
    if args.only == "scale":
        scale_curve([int(x) for x in args.gpus.split(",")],
                    [int(x) for x in args.measure.split(",")], ref)
        return
    if args.only == "largest":
        largest(int(args.measure.split(",")[-1]), ref)
        return
    if args.only == "paper":
        whole_paper(args.jobs, ref)
        return
    if args.only == "decision-largest":
        decision_largest()
        return
    if args.only in (None, "decision"):
        decision_latency()
    if args.only in (None, "trace"):
        whole_trace_64()
    if args.only in (None, "1024") and not args.skip_1024:
        run_1024()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory of this process: {rss:.0f} MB")


if __name__ == "__main__":
    main()
