"""How much of the gap between the engines is scheduling divergence.

The flow model's own run places every request on its own predicted times; one small
difference in a queue estimate sends a request elsewhere, and from then on the two engines
serve different runs. The forced run (model/follow.py) places each request where the
packets did: what gap is left is the network and serving model; what it closed was
scheduling divergence.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from testbed.records import read_csv


def placements(rows: list[dict]) -> dict[str, tuple[str, str]]:
    """request id -> (prefill, decode), for the requests that were placed."""
    return {r["id"]: (r["prefill"], r["decode"]) for r in rows if r.get("decode")}


def recorded(emu_cells: dict[str, Path]) -> Callable:
    """For run_flowsim(follow=...): a flow cell's placements, read from the packets' cell
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
