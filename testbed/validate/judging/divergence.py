"""How much of the gap between the engines is scheduling divergence.

The flow model's own run places every request on its own predicted times; one small
difference in a queue estimate sends a request elsewhere, and from then on the two engines
serve different runs. The forced run (model/follow.py) places each request where the
packets did: what gap is left is the network and serving model; what it closed was
scheduling divergence.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

from testbed.records import read_csv


def placements(rows: list[dict]) -> dict[str, tuple[str, str]]:
    """request id -> (prefill, decode), for the requests that were placed."""
    return {r["id"]: (r["prefill"], r["decode"]) for r in rows if r.get("decode")}


def recorded(emu_cells: dict[str, Path]) -> Callable:
    """For run_simulated(follow=...): a flow cell's placements, read from the packets' cell
    of the same point, scheduler and seed (none for a cell the packets did not run)."""
    def follow(task) -> dict | None:
        cell = emu_cells.get(task.rel.removeprefix("cells/"))
        return placements(read_csv(cell / "requests.csv")) if cell is not None else None
    return follow


def agreement(emu_cells: dict[str, Path], flow_cells: dict[str, Path]) -> dict:
    """point -> scheduler -> how many measured requests the flow run placed as the packets
    did: on the same prefill, the same decode, both."""
    out: dict[str, dict[str, dict]] = {}
    for key, cell in emu_cells.items():
        if key not in flow_cells:
            continue
        point, sched, _ = key.split("/")
        ref = {r["id"]: r for r in read_csv(cell / "requests.csv")
               if r.get("measured") in (True, "True") and r.get("decode")}
        mod = placements(read_csv(flow_cells[key] / "requests.csv"))
        acc = out.setdefault(point, {}).setdefault(
            sched, {"n": 0, "prefill": 0, "decode": 0, "both": 0})
        for rid, r in ref.items():
            got = mod.get(rid)
            acc["n"] += 1
            if got is None:
                continue
            acc["prefill"] += got[0] == r["prefill"]
            acc["decode"] += got[1] == r["decode"]
            acc["both"] += got == (r["prefill"], r["decode"])
    return out


def gap_closed(free: dict, forced: dict) -> dict:
    """point -> scheduler -> mean TTFT error free and forced (ttft_verdicts' intervals) and
    the share of the free gap that following the packets' placements closed (1 - |forced| /
    |free|; negative when following them made the gap wider)."""
    out: dict[str, dict[str, dict]] = {}
    for point, by in free.items():
        for sched, iv in by.items():
            other = forced.get(point, {}).get(sched)
            if other is None:
                continue
            a, b = iv["point"], other["point"]
            out.setdefault(point, {})[sched] = {
                "free": iv, "forced": other,
                "closed": (1 - abs(b) / abs(a)) if a == a and b == b and a else None}
    return out


def _num(x) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v == v else None


def overlap(rows: list[dict]) -> dict:
    """What a run's transfers met, against what the scheduler counted: for each measured
    transfer, the transfers in flight when it started from its own prefill on its tier
    (eq. 4's n, all NetKV sees of them), from the other prefills, and into its decode
    instance; means over the run, and its transfers' time over their predicted time.
    The flow engine's decisions drift from the packets' through what eq. 4 does not
    count: where that overlap grows, transfers run longer than predicted, and more of
    them overlap."""
    sent = []
    for r in rows:
        start, end = _num(r.get("transfer_start")), _num(r.get("transfer_end"))
        if start is not None and end is not None and r.get("decode") and \
                r.get("tier") not in (None, "", "0"):
            sent.append((start, end, r["prefill"], r["decode"], r["tier"],
                         r.get("measured") in (True, "True"), _num(r.get("predicted_transfer_s"))))
    own, other, into, took, predicted = [], [], [], 0.0, 0.0
    active: list[tuple] = []  # by start: those not yet ended (a sweep, not all pairs)
    for t in sorted(sent, key=lambda x: x[0]):
        start, end, prefill, decode, tier, measured, pred = t
        active = [x for x in active if x[1] > start]
        live = [x for x in active if x[0] < start]
        active.append(t)
        if not measured:
            continue
        own.append(sum(1 for x in live if x[2] == prefill and x[4] == tier))
        other.append(sum(1 for x in live if x[2] != prefill))
        into.append(sum(1 for x in live if x[3] == decode))
        if pred:
            took += end - start
            predicted += pred
    if not own:
        return {"n": 0}
    return {"n": len(own), "own": statistics.fmean(own), "other": statistics.fmean(other),
            "into": statistics.fmean(into),
            "over_predicted": took / predicted if predicted else None}


def overlaps(emu_cells: dict[str, Path], free: dict[str, Path], forced: dict[str, Path]
             ) -> dict:
    """point -> scheduler -> {packets, free, forced: overlap(...)} on the first seed that
    each engine ran (a diagnosis, not a verdict: one run each)."""
    out: dict[str, dict[str, dict]] = {}
    for key in sorted(emu_cells):
        point, sched, _ = key.split("/")
        if sched in out.get(point, {}) or key not in free:
            continue
        runs = {"packets": emu_cells[key], "free": free[key], "forced": forced.get(key)}
        out.setdefault(point, {})[sched] = {
            name: overlap(read_csv(cell / "requests.csv"))
            for name, cell in runs.items() if cell is not None}
    return out
