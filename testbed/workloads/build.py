"""Turn a scenario's workload section into the request list both engines replay."""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from testbed.model.timing import prefill_capacity_rps
from testbed.workloads import synthetic
from testbed.workloads.mooncake import read_trace
from testbed.workloads.profiles import (
    apply_sharing,
    compress,
    filter_profile,
    override_length,
)
from testbed.workloads.requests import Request


def request_slo(slo_s: float, slo_mix, request_id: str) -> float:
    """A request's TTFT SLO: the scenario's, or a draw from slo_mix seeded by its id."""
    if not slo_mix:
        return slo_s
    u = zlib.crc32(request_id.encode()) / 2**32
    acc = 0.0
    for share, slo in slo_mix:
        acc += share
        if u < acc:
            return slo
    return slo_mix[-1][1]


@dataclass(frozen=True)
class Workload:
    requests: list[Request]
    history: list[Request]  # trace requests before the window, for cache prewarm
    rate_rps: float
    capacity_rps: float
    warmup_s: float
    measure_s: float
    slo_s: float
    slo_mix: tuple[tuple[float, float], ...] | None = None

    def slo_for(self, request_id: str) -> float:
        return request_slo(self.slo_s, self.slo_mix, request_id)


@lru_cache(maxsize=4)
def _cached_trace(path: str, mtime: float) -> tuple[Request, ...]:
    return tuple(read_trace(path))


def load_trace(path: str) -> list[Request]:
    p = Path(path)
    mtime = p.stat().st_mtime if p.exists() else 0.0
    return list(_cached_trace(str(p), mtime))


def offered_rate(scenario, seed: int) -> tuple[float, float]:
    """(rate, capacity) in requests/s: the prefill pool's capacity for the workload's own
    length mix, and what the scenario offers. Cheap: no request list is built, so a size
    estimate can refuse a run before it allocates anything."""
    wl = scenario.workload
    timing = scenario.timing_model()
    n_prefill = len(scenario.cluster.spec().prefill_pool)
    if wl.synthetic is not None:
        s = wl.synthetic
        profile = scenario.profile()
        mean_in = wl.input_length or s.mean_input
        # capacity from the generator's own mix, drawn with a separate seeded stream
        probe = synthetic.generate(random.Random(seed + 10_000), 100.0, 20.0, mean_in,
                                   s.sigma_input, s.mean_output, profile.min_input or 16,
                                   profile.max_input or 131072)
        lengths = [wl.input_length or r.input_len for r in probe]
    else:
        trace = _profile_trace(scenario)
        lengths = [wl.input_length or r.input_len for r in trace]
    capacity = prefill_capacity_rps(timing, lengths, n_prefill)
    return wl.rate_rps or wl.load * capacity, capacity


def _profile_trace(scenario) -> list[Request]:
    wl = scenario.workload
    trace = filter_profile(load_trace(wl.trace), scenario.profile())
    if len(trace) < 2:
        raise ValueError(f"{wl.trace}: fewer than two requests match profile '{wl.profile}'")
    return trace


def workload_seed(scenario, seed: int) -> int:
    """The seed whose workload seed `seed` replays (workload.segments): itself unless the
    seeds cycle through fewer workloads than there are seeds."""
    cycle = scenario.workload.segments
    return seed if cycle is None else scenario.seed + (seed - scenario.seed) % cycle


def seed_groups(scenario) -> dict[int, int] | None:
    """seed -> workload_seed for every seed of the scenario, where seeds cycle through
    fewer workloads (None otherwise: each seed its own)."""
    if scenario.workload.segments is None:
        return None
    return {k: workload_seed(scenario, k)
            for k in range(scenario.seed, scenario.seed + scenario.seeds)}


def build_workload(scenario, seed: int) -> Workload:
    """Requests arriving in [0, warmup + measure), at the scenario's rate, seeded (by
    workload_seed: seeds of one cycled workload get the same requests)."""
    seed = workload_seed(scenario, seed)
    wl = scenario.workload
    duration = wl.warmup_s + wl.measure_s
    rng = random.Random(seed)
    rate, capacity = offered_rate(scenario, seed)
    if wl.synthetic is not None:
        s = wl.synthetic
        profile = scenario.profile()
        mean_in = wl.input_length or s.mean_input
        p_share = scenario.p_share()
        reqs = synthetic.generate(
            rng, rate, duration, mean_in, s.sigma_input, s.mean_output,
            profile.min_input or 16, profile.max_input or 131072,
            p_share=0.5 if p_share is None else p_share, documents=s.documents,
            zipf_s=s.zipf_s, share_fraction=s.share_fraction,
        )
        if wl.input_length:
            reqs = override_length(reqs, wl.input_length)
        return Workload(reqs, [], rate, capacity, wl.warmup_s, wl.measure_s, scenario.slo_s(),
                        _mix(wl.slo_mix))

    trace = _profile_trace(scenario)
    if wl.input_length:
        trace = override_length(trace, wl.input_length)
    p_share = scenario.p_share()
    if p_share is not None:
        trace = apply_sharing(trace, p_share, rng)
    offset = trace_offset(scenario, seed, trace, rate)
    span_needed = offset + duration * rate / _rate(trace, wl.trace)
    if span_needed > trace[-1].arrival_s:
        if not wl.trace_loop:
            raise ValueError(
                f"{wl.trace}: the trace ends at {trace[-1].arrival_s:.0f} s but this run needs "
                f"trace seconds up to {span_needed:.0f} s at {rate:.2f} req/s"
                + (f" (seed {seed}'s segment)" if wl.seed_segments else "")
                + "; lower the load, the duration, trace_offset_s or the seeds, set "
                "workload.trace_loop, or use a synthetic workload"
            )
        trace = loop_trace(trace, span_needed)
    reqs = compress(trace, rate, offset, duration)
    history = [r for r in trace if r.arrival_s < offset] if wl.prewarm else []
    return Workload(reqs, history, rate, capacity, wl.warmup_s, wl.measure_s, scenario.slo_s(),
                    _mix(wl.slo_mix))


def seed_offset(scenario, seed: int) -> float:
    """Where seed `seed`'s window starts in the trace (what build_workload replays)."""
    if scenario.workload.synthetic is not None:
        return scenario.workload.trace_offset_s
    seed = workload_seed(scenario, seed)
    return trace_offset(scenario, seed, _profile_trace(scenario), offered_rate(scenario, seed)[0])


def segments_available(scenario) -> int | None:
    """How many seeds get a segment of the trace of their own (seed_segments) before it
    ends; None where there is no end to reach (a synthetic workload, or trace_loop)."""
    wl = scenario.workload
    if wl.synthetic is not None or wl.trace_loop:
        return None
    trace = _profile_trace(scenario)
    rate = offered_rate(scenario, scenario.seed)[0]
    window = (wl.warmup_s + wl.measure_s) * rate / _rate(trace, wl.trace)
    return max(0, int((trace[-1].arrival_s - wl.trace_offset_s) // window))


def trace_offset(scenario, seed: int, trace: list[Request], rate: float) -> float:
    """Where seed `seed` starts in the trace: trace_offset_s, or with seed_segments one
    window (warm-up + measurement, in trace seconds) further per seed after the first."""
    wl = scenario.workload
    if not wl.seed_segments:
        return wl.trace_offset_s
    window = (wl.warmup_s + wl.measure_s) * rate / _rate(trace, wl.trace)
    return wl.trace_offset_s + max(0, seed - scenario.seed) * window


def _mix(mix) -> tuple[tuple[float, float], ...] | None:
    return tuple((float(a), float(b)) for a, b in mix) if mix else None


class LoopedTrace(Sequence):
    """The trace followed by replays of itself until `until_s`, ids shifted so replays
    share nothing with each other. Replays are made as they are iterated: compress() keeps
    only the window a run needs, so a cell at thousands of GPUs never holds every replay
    and the compressed requests at once."""

    def __init__(self, trace: list[Request], until_s: float):
        self.trace = trace
        self.period = trace[-1].arrival_s - trace[0].arrival_s + 1.0 / _rate(trace)
        self.shift = 1 + max(max(r.hash_ids) for r in trace)
        self.copies = 1
        while trace[-1].arrival_s + (self.copies - 1) * self.period < until_s:
            self.copies += 1

    def _replay(self, r: Request, k: int) -> Request:
        if k == 0:
            return r
        return replace(r, request_id=f"{r.request_id}.{k}", arrival_s=r.arrival_s + k * self.period,
                       hash_ids=tuple(h + k * self.shift for h in r.hash_ids))

    def __len__(self) -> int:
        return self.copies * len(self.trace)

    def __getitem__(self, i: int) -> Request:  # type: ignore[override]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        k, j = divmod(i, len(self.trace))
        return self._replay(self.trace[j], k)

    def __iter__(self) -> Iterator[Request]:
        for k in range(self.copies):
            for r in self.trace:
                yield self._replay(r, k)


def loop_trace(trace: list[Request], until_s: float) -> LoopedTrace:
    """Append replays of the trace, ids shifted so replays share nothing with each other."""
    return LoopedTrace(trace, until_s)


def _rate(trace: list[Request], source: str = "the trace") -> float:
    """The trace's own arrival rate, which compression scales to the run's."""
    span = trace[-1].arrival_s - trace[0].arrival_s
    if span <= 0:
        raise ValueError(f"{source}: all {len(trace)} requests of the trace (after the profile filter) "
                         "arrive at the same timestamp: it has no arrival rate to scale")
    return (len(trace) - 1) / span


def prewarm_placement(history: list[Request], decode_names: list[str],
                      seed: int) -> dict[str, list[Request]]:
    """Which decode instance each history request warms: seeded, the same for every
    scheduler and both engines (independent of any scheduling decision)."""
    rng = random.Random(seed * 31 + 5)
    names = sorted(decode_names)
    placed: dict[str, list[Request]] = {n: [] for n in names}
    for req in history:
        placed[names[rng.randrange(len(names))]].append(req)
    return placed
