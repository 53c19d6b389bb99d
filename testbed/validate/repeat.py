"""Packets against packets: how far repeated runs of one scenario and seed on the fabric
are from each other, transfer by transfer.

No flow model can be judged closer to packets than packets are to themselves: where two
runs of the same transfer (same request, hosts, paths and, within the run's jitter,
start) take different times, a deterministic model can at best predict what they do
on the whole. So the per-transfer error of the flow model is read against this floor.
Each run's time of a whole transfer is set against the median of the other runs' times
(leave one out: with two runs, the other one), for the transfers every run placed
alike and above the validity floor. RR places requests without looking at timing, so
its repeated runs place (nearly) every request alike; a scheduler that reads load or
congestion soon places them differently, and only what it placed alike counts.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from testbed.records import read_csv
from testbed.validate import arrival, compare, validity


def _placements(rows: Sequence[dict]) -> dict[str, frozenset]:
    """Request -> its shards' (shard, src, dst, path): where the run put its transfer."""
    out: dict[str, set] = {}
    for r in rows:
        out.setdefault(str(r["request"]), set()).add(
            (str(r["shard"]), r["src"], r["dst"], r.get("path") or ""))
    return {request: frozenset(shards) for request, shards in out.items()}


def spread_errors(runs: Sequence[Sequence[dict]], floors: Mapping[int, dict]
                  ) -> tuple[list[float], list[str], list[str]]:
    """Each run's whole-transfer time against the other runs' median, for transfers
    placed alike in every run and above the floor: the errors, each one's request and
    its arrival order in its own run (testbed/validate/arrival.py)."""
    if len(runs) < 2:
        return [], [], []
    placed = [_placements(rows) for rows in runs]
    whole = [{str(w["request"]): w for w in compare.whole_transfers(rows)} for rows in runs]
    alike = set.intersection(*(set(w) for w in whole))
    alike = sorted(r for r in alike if len({p.get(r) for p in placed}) == 1)
    orders = [arrival.arrival_orders(rows) for rows in runs]
    errors, requests, kinds = [], [], []
    for request in alike:
        first = whole[0][request]
        if not validity.above_floor(int(first["tier"]), float(first["bytes"]), floors):
            continue
        times = [w[request]["end"] - w[request]["start"] for w in whole]
        if min(times) <= 0:
            continue
        for i, t in enumerate(times):
            errors.append(t / statistics.median(times[:i] + times[i + 1:]) - 1)
            requests.append(request)
            kinds.append(orders[i][request])
    return errors, requests, kinds


def packets_against_packets(cells: Sequence[Mapping[str, Path]], floors: Mapping[int, dict],
                            replay: Mapping[str, list[dict]] | None = None) -> dict | None:
    """The floor over every cell (point/scheduler/seed) that all of `cells` (each one
    run's cells, the first the validation's own) ran: n, median and p90 |error|, by
    arrival order, the cells used; with `replay` (the flow model's replay of the first
    run), the model's error on the very same transfers beside it. None with fewer than
    two runs of any cell."""
    keys = sorted(set.intersection(*(set(c) for c in cells))) if len(cells) > 1 else []
    errors, kinds, model = [], [], []
    used = []
    for key in keys:
        runs = [read_csv(c[key] / "transfers.csv") for c in cells]
        got, requests, orders = spread_errors(runs, floors)
        if not got:
            continue
        used.append(key)
        errors += got
        kinds += orders
        if replay is not None and key in replay:
            judged = set(requests)
            pairs, _ = compare.match_transfers(
                [w for w in compare.whole_transfers(runs[0]) if str(w["request"]) in judged],
                compare.whole_transfers(replay[key]))
            model += [p.error for p in pairs]
    if not used:
        return None
    return {"runs": len(cells), "cells": used, **compare.error_stats(errors),
            "by_arrival": {o: compare.error_stats([e for e, k in zip(errors, kinds, strict=True)
                                                   if k == o]) for o in arrival.ORDERS},
            "replay_same_transfers": compare.error_stats(model) if replay is not None else None}


def repeat_targets(floor: dict | None) -> dict:
    """What the verdict lines read of the floor (empty when it was not measured)."""
    if not floor:
        return {}
    return {"packets_runs": floor["runs"],
            "packets_median_abs_transfer_error": floor["median_abs_error"],
            "packets_p90_abs_transfer_error": floor["p90_abs_error"],
            "replay_same_p90_abs_transfer_error": (floor["replay_same_transfers"] or {}).get(
                "p90_abs_error")}


def repeat_scenario(scenario):
    """The scenario to run again on packets: its first seed, RR alone where it has RR
    (its placements do not depend on timing, so its runs place every request alike)."""
    keys = list(scenario.schedulers)
    return scenario.with_overrides({"seeds": 1, "schedulers": ["rr"] if "rr" in keys else keys})


def repeat_folders(validation: Path) -> list[Path]:
    """The packet runs made again for the floor, oldest first."""
    return sorted((Path(validation) / REPEATS).glob("*-emulation-*"))


REPEATS = "repeats"  # under a validation folder: its packet runs made again
