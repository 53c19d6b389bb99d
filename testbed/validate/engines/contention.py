"""Links under contention: the calibration's competing probes run through the flow model.

A probe is n transfers on one tier pair's path (the fabric's ECMP hashes the pair), started
together or spaced; the flow model replays it with the replica's TCP terms, and the contention
delay (tcp.contention_delay) is fitted so that its last transfer ends when the packets'
did (calibration.fit_contention), the join stall (tcp.join_stall) so that a spaced
probe's first arrival ends when the packets' did (calibration.fit_join_stall). Pure:
no fabric, so an old validation's calibration can be fitted again when it is judged
anew.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from testbed.flowsim.network import FluidNetwork
from testbed.flowsim.pair_lanes import Lanes
from testbed.flowsim.transfers import engine_lanes
from testbed.validate.engines.flow_match import flow_scenario
from testbed.validate.judging.calibration import fit_contention, fit_join_stall, lone_spread
from testbed.validate.judging.validity import tier_pairs


def probe_ends(scenario, factors: dict[int, float], tcp_fit: dict | None, shards: int):
    """ends(idle, tier, bytes, starts, stall=0): when each of a competing probe's transfers
    (one per start, modelled seconds) ends in the flow model (TCP terms with the link
    contention `idle` and the join stall `stall`, or the fluid model when tcp_fit is
    None), all on the tier pair's one path as on the fabric (its ECMP hashes the pair);
    through the Transfer Engine, one pair's shards wait for its lanes as a run's do."""
    spec = scenario.cluster.spec()
    pairs = tier_pairs(spec)
    base = flow_scenario(scenario, factors, tcp_fit).tcp_params() if tcp_fit is not None else None
    lanes = engine_lanes(scenario)

    def ends(idle: float, tier: int, size: float, starts: list[float],
             stall: float = 0.0) -> list[float]:
        net = FluidNetwork(spec, None, factors, replace(
            base, contention_idle=idle, join_stall_s=stall) if base else None)
        path = spec.paths(*pairs[tier])[0]
        arrivals = sorted((t, j) for j, t in enumerate(starts))
        ledger = Lanes(lanes)  # one pair, its lanes warmed (the probe's first writes)
        out = [0.0] * len(starts)

        def send(t: float, ready: list[tuple[int, int]]) -> None:
            for j, k in ready:
                net.add_flow(path, size / shards, t, tag=j, shard=(k, shards), group=j,
                             share=False)
            if ready:
                net.recompute(path)

        while arrivals or net.flows or net.draining:
            nxt = net.next_completion()
            if arrivals and (nxt is None or arrivals[0][0] <= nxt):
                t, j = arrivals.pop(0)
                send(t, ledger.admit("probe", [(j, k) for k in range(shards)]))
            else:
                ended = 0
                for flow in net.pop_finished(nxt):
                    if flow.tag is not None:
                        out[flow.tag] = nxt  # its last shard's end is the transfer's
                        ended += 1
                send(nxt, ledger.release("probe", ended))
        return out
    return ends


def last_ends(scenario, factors: dict[int, float], tcp_fit: dict | None, shards: int):
    """last_end(idle, tier, bytes, starts): when the last of a probe's transfers ends."""
    ends = probe_ends(scenario, factors, tcp_fit, shards)
    return lambda idle, tier, size, starts: max(ends(idle, tier, size, starts))


def _probes(raw: dict, only=None) -> list[tuple[int, float, list[float], list[float]]]:
    """(tier, modelled bytes, starts, seconds) of every competing probe, or of those whose
    record `only` accepts; a calibration from before staggered starts has none recorded
    (all together)."""
    return [(int(t), d["bytes"], d.get("starts") or [0.0] * len(d["seconds"]), d["seconds"])
            for t, r in raw.items() for d in r.get("competing", []) if only is None or only(d)]


def contention(scenario, factors: dict[int, float], tcp_fit: dict, raw: dict, shards: int) -> dict:
    """The TCP model's contention delay (tcp.contention_delay), fitted on the competing
    probes alone: never on a workload."""
    last_end = last_ends(scenario, factors, tcp_fit, shards)
    return fit_contention([(max(sec), (lambda idle, t=t, b=b, st=st: last_end(idle, t, b, st)))
                           for t, b, st, sec in _probes(raw) if len(sec) >= 2])


def join_stall(scenario, factors: dict[int, float], tcp_fit: dict, raw: dict, shards: int) -> dict:
    """The TCP model's join stall (tcp.join_stall), fitted on the staggered probes alone
    (never on a workload): the first arrival's time matched, link contention off as in
    the verdict's model."""
    ends = probe_ends(scenario, factors, tcp_fit, shards)

    def first(stall: float, tier: int, size: float, starts: list[float]) -> float:
        j = starts.index(min(starts))
        return ends(0.0, tier, size, starts, stall)[j] - starts[j]

    return fit_join_stall([
        (sec[st.index(min(st))], lambda stall, t=t, b=b, st=st: first(stall, t, b, st),
         max(s + x for s, x in zip(st, sec, strict=True)))
        for t, b, st, sec in _probes(raw, only=_spaced)])


# a probe is staggered when each transfer starts at least this share of the first one's
# time after the one before: "together" probes start microseconds apart (the senders'
# launch), which says nothing of who was there first
SPACED_SHARE = 0.05


def _spaced(probe: dict) -> bool:
    """Whether a competing probe's transfers were started apart on purpose: as the
    calibration asked (`asked_spacing_s`), or, in a calibration from before it recorded
    that, as its starts say (a together probe of small transfers, a few ms each, can
    read as spaced there: the senders' launch is ms apart on a loaded machine)."""
    if "asked_spacing_s" in probe:
        return probe["asked_spacing_s"] > 0
    starts, seconds = probe.get("starts") or [], probe["seconds"]
    if len(starts) < 2:
        return False
    first = seconds[starts.index(min(starts))]
    ordered = sorted(starts)
    return all(b - a >= SPACED_SHARE * first for a, b in itertools.pairwise(ordered))


def competing_residuals(scenario, factors: dict[int, float], tcp_fit: dict, raw: dict,
                        shards: int) -> list[dict]:
    """Per competing probe: the slowest and fastest transfer, the error on the slowest of
    the fluid model, the TCP model without link contention and with the fitted one, and
    the TCP model's error per transfer in arrival order without and with the join stall."""
    tcp_ends = probe_ends(scenario, factors, tcp_fit, shards)
    tcp_end = last_ends(scenario, factors, tcp_fit, shards)
    fluid_end = last_ends(scenario, factors, None, shards)
    idle = float(tcp_fit.get("contention_idle", 0.0))
    stall = float(tcp_fit.get("join_stall_s", 0.0))
    out = []
    for t, b, starts, secs in _probes(raw):
        slowest = max(secs)
        alone = len(secs) < 2
        est = None if alone else fit_contention(
            [(slowest, lambda idle, t=t, b=b, st=starts: tcp_end(idle, t, b, st))])
        arrival = sorted(range(len(secs)), key=lambda j: starts[j])
        modelled = tcp_ends(0.0, t, b, starts)
        joined = tcp_ends(0.0, t, b, starts, stall) if stall else modelled
        out.append({"tier": t, "competing": len(secs), "bytes": b,
                    # the TCP model's error on each transfer, first arrival first: packets
                    # need not share as max-min does, and the first carries the difference
                    "by_arrival": [(modelled[j] - starts[j] - secs[j]) / secs[j]
                                   for j in arrival],
                    "by_arrival_joined": [(joined[j] - starts[j] - secs[j]) / secs[j]
                                          for j in arrival],
                    "idle_estimate": None if est is None else est["contention_idle"],
                    "spacing_s": max(starts) / max(len(starts) - 1, 1),
                    "slowest_s": slowest, "fastest_s": min(secs),
                    "tcp_error": (max(modelled) - slowest) / slowest,
                    "contended_error": (tcp_end(idle, t, b, starts) - slowest) / slowest,
                    "fluid_error": (fluid_end(0.0, t, b, starts) - slowest) / slowest})
    return out


# Which flow model the probe fits were made with (stored as the fit's "probe_fits"): the
# fits depend on how the model shares a path, so a calibration fitted for another is
# fitted again from its own probes. 2: a transfer's streams ranked among those still
# sending; 3: the shard spread fitted on every shard's end.
PROBE_FITS = 3


def probe_fits(scenario, factors: dict[int, float], tcp_fit: dict, tiers: dict, shards: int) -> dict:
    """Every term fitted on the calibration's probes alone (never on a workload): the
    shard spread on its lone transfers, then link contention and the join stall on its
    competing ones; marked with the flow model they were fitted for. `tiers` as a
    calibration records them."""
    fitted = lone_spread(tiers)
    fitted.update(contention(scenario, factors, {**tcp_fit, **fitted}, tiers, shards))
    fitted.update(join_stall(scenario, factors, {**tcp_fit, **fitted}, tiers, shards))
    return {**fitted, "probe_fits": PROBE_FITS}


def with_probe_fits(scenario, cal: dict) -> dict:
    """`cal` with its probe fits made again from its own probes if they were made for
    another flow model (or before a term existed): the shard spread from its lone
    transfers, link contention and the join stall where it has competing probes."""
    fit = cal.get("tcp")
    tiers = cal.get("tiers", {})
    if not fit or fit.get("probe_fits") == PROBE_FITS:
        return cal
    if not any(t.get("competing") for t in tiers.values()):
        return {**cal, "tcp": {**fit, **lone_spread(tiers)}}
    factors = {int(k): float(v) for k, v in cal["capacity_factor"].items()}
    shards = scenario.network.flows_per_transfer or scenario.cluster.spec().tp
    fit = {**fit, **probe_fits(scenario, factors, fit, tiers, shards)}
    return {**cal, "tcp": fit, "competing": competing_residuals(scenario, factors, fit, tiers, shards)}
