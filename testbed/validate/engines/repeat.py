"""Packets against packets: how far repeated runs of one scenario and seed on the fabric
are from each other, transfer by transfer.

No flow model can be judged closer to packets than packets are to themselves: where two
runs offer the network the same transfer under the same load and it still takes
different times, a deterministic model, which sees only what was offered (what the
replay is given), can at best predict what the runs do on the whole. So the replay's
per-transfer error is read against this floor. For every pair of runs, each one's time
of a whole transfer above the validity floor that the two offered alike is set against
the other's. By pairs, not across all runs at once: the more runs, the fewer transfers
every one of them offers alike.

"Offered alike": the same hosts and paths in both runs, every shard starting at the
same moment relative to the transfer's first start, and every transfer that shared a
link with it in any run (its competitors) placed alike and starting, by its first shard,
at the same moment too (by every shard, next to no transfer of a loaded run would count), each to
within START_TOLERANCE of the transfer's time (a shift that small moves its time by
no more than that). Where starts differ (a connection that waited out a lost SYN, a
prefill that ran late), the replay is given the difference and packets against packets
are not, so such transfers do not count; `offered_alike` says what share of the
transfers above the floor did. RR places requests without looking at timing, so its
repeated runs place (nearly) every request alike; a scheduler that reads load soon
places them apart, and only what it placed alike counts.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from testbed.records import read_csv
from testbed.validate.judging import arrival, model_errors, stats, validity
from testbed.validate.judging.targets import START_TOLERANCE


def _placements(rows: Sequence[dict]) -> dict[str, frozenset]:
    """Request -> its shards' (shard, src, dst, path): where the run put its transfer."""
    out: dict[str, set] = {}
    for r in rows:
        out.setdefault(str(r["request"]), set()).add(
            (str(r["shard"]), r["src"], r["dst"], r.get("path") or ""))
    return {request: frozenset(shards) for request, shards in out.items()}


def _offered_alike(runs: Sequence[Sequence[dict]], whole: Sequence[Mapping[str, dict]]
                   ) -> set[str]:
    """The requests every run placed alike and started alike (see START_TOLERANCE)."""
    placed = [_placements(rows) for rows in runs]
    starts = [{} for _ in runs]
    for i, rows in enumerate(runs):
        for r in rows:
            starts[i][(str(r["request"]), str(r["shard"]))] = float(r["start"])
    out = set()
    for request in set.intersection(*(set(w) for w in whole)):
        if len({p.get(request) for p in placed}) != 1:
            continue
        shortest = min(w[request]["end"] - w[request]["start"] for w in whole)
        shards = [s for s, *_ in placed[0][request]]
        offsets = [[starts[i][(request, s)] - w[request]["start"] for s in shards]
                   for i, w in enumerate(whole)]
        if all(abs(a - b) <= START_TOLERANCE * shortest
               for other in offsets[1:] for a, b in zip(offsets[0], other, strict=True)):
            out.add(request)
    return out


def _load_alike(request: str, whole: Sequence[Mapping[str, dict]],
                near: Sequence[Mapping[str, tuple[set[str], set[str]]]],
                placed: Sequence[Mapping[str, frozenset]]) -> bool:
    """Whether `request`'s transfer, and every transfer that shared a link with it in
    any run, is in every run, placed alike (a scheduler that reads load may put a
    competitor elsewhere in one run, off the path) and started at the same moment in all
    (START_TOLERANCE)."""
    shortest = min(w[request]["end"] - w[request]["start"] for w in whole)
    others = set().union(*(n[request][0] | n[request][1] for n in near if request in n))
    for other in others | {request}:
        starts = [w[other]["start"] for w in whole if other in w]
        if len(starts) < len(whole) or max(starts) - min(starts) > START_TOLERANCE * shortest:
            return False
        if len({p.get(other) for p in placed}) != 1:
            return False
    return True


def spread_errors(runs: Sequence[Sequence[dict]], floors: Mapping[int, dict]
                  ) -> tuple[list[float], list[str], list[str]]:
    """Each run's whole-transfer time against the other runs' median, for transfers
    offered alike in every run (see the module's docstring) and above the floor: the
    errors, each one's request and its arrival order in its own run
    (validate/judging/arrival.py)."""
    if len(runs) < 2:
        return [], [], []
    whole = [{str(w["request"]): w for w in model_errors.whole_transfers(rows)} for rows in runs]
    offered = _offered_alike(runs, whole)
    near = [arrival.neighbours(rows) for rows in runs]
    placed = [_placements(rows) for rows in runs]
    alike = sorted(r for r in offered if _load_alike(r, whole, near, placed))
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
            kinds.append(arrival.order(*near[i][request]))
    return errors, requests, kinds


def packets_against_packets(cells: Sequence[Mapping[str, Path]], floors: Mapping[int, dict],
                            replay: Mapping[str, list[dict]] | None = None) -> dict | None:
    """The floor over the cells (point/scheduler/seed) of `cells` (each one run's cells,
    the first the validation's own), every pair of runs that both ran a cell: n, median
    and p90 |error|, by arrival order, the cells used, and the share of the first run's
    transfers above the floor that some other run offered alike; with `replay` (the flow
    model's replay of the first run), the model's error on those very transfers; and the
    both-engines floor (engines_floor). None where no transfer was offered alike in any
    pair."""
    rows: dict[tuple[int, str], list[dict]] = {}

    def of(i: int, key: str) -> list[dict]:
        if (i, key) not in rows:
            rows[i, key] = read_csv(cells[i][key] / "transfers.csv")
        return rows[i, key]

    errors, kinds, units = [], [], []
    used: set[str] = set()
    mine: dict[str, set[str]] = {}  # cell -> the first run's transfers judged
    for i, j in itertools.combinations(range(len(cells)), 2):
        for key in sorted(set(cells[i]) & set(cells[j])):
            got, requests, orders = spread_errors([of(i, key), of(j, key)], floors)
            if not got:
                continue
            used.add(key)
            errors += got
            kinds += orders
            units += [(key, request) for request in requests]
            if i == 0:
                mine.setdefault(key, set()).update(requests)
    if not errors:
        return None
    again = set().union(*(set(c) for c in cells[1:])) & set(cells[0])  # cells run again
    above = sum(validity.above_floor(int(w["tier"]), float(w["bytes"]), floors)
                for key in again for w in model_errors.whole_transfers(of(0, key)))
    model = []
    for key, judged in mine.items():
        if replay is not None and key in replay:
            pairs, _ = model_errors.match_transfers(
                [w for w in model_errors.whole_transfers(of(0, key)) if str(w["request"]) in judged],
                model_errors.whole_transfers(replay[key]))
            model += [p.error for p in pairs]
    median, p90 = (stats.clustered_abs_quantile(errors, units, q) for q in (0.5, 0.9))
    return {"runs": len(cells), "cells": sorted(used), **model_errors.error_stats(errors),
            "median_ci": [median.low, median.high], "p90_ci": [p90.low, p90.high],
            "transfers": p90.n,
            "offered_alike": sum(len(v) for v in mine.values()) / above if above else 0.0,
            "by_arrival": {o: model_errors.error_stats([e for e, k in zip(errors, kinds, strict=True)
                                                   if k == o]) for o in arrival.ORDERS},
            "replay_same_transfers": model_errors.error_stats(model) if replay is not None else None,
            "engines": engines_floor(cells, of)}


def engines_floor(cells: Sequence[Mapping[str, Path]],
                  rows_of: Callable[[int, str], list[dict]] | None = None) -> dict | None:
    """Packets deciding for themselves against packets deciding again: every whole transfer
    two runs of a cell both made, matched by request wherever each placed it, as the
    both-engines figure matches the flow model's runs to the packets'. The floor for that
    figure only where the runs again cover every scheduler of the first (ns-3's perturbed
    runs do; the emulation's, RR alone, would understate it): otherwise None. `rows_of(i,
    key)`: run i's transfers.csv rows of a cell, where the caller has them read."""
    def schedulers(c: Mapping[str, Path]) -> set[str]:
        return {key.split("/")[1] for key in c}

    if len(cells) < 2 or not schedulers(cells[0]) <= set().union(*map(schedulers, cells[1:])):
        return None
    rows_of = rows_of or (lambda i, key: read_csv(cells[i][key] / "transfers.csv"))
    errors, units = [], []
    for i, j in itertools.combinations(range(len(cells)), 2):
        for key in sorted(set(cells[i]) & set(cells[j])):
            pairs, _ = model_errors.match_transfers(model_errors.whole_transfers(rows_of(i, key)),
                                               model_errors.whole_transfers(rows_of(j, key)))
            errors += [p.error for p in pairs]
            units += [(key, p.request) for p in pairs]
    if not errors:
        return None
    median = stats.clustered_abs_quantile(errors, units, 0.5)
    return {**model_errors.error_stats(errors), "median_ci": [median.low, median.high],
            "schedulers": sorted(schedulers(cells[0]))}


def repeat_targets(floor: dict | None) -> dict:
    """What the verdict lines read of the floor (empty when it was not measured)."""
    if not floor:
        return {}
    return {"packets_runs": floor["runs"], "packets_cells": len(floor.get("cells", [])),
            "packets_median_abs_transfer_error": floor["median_abs_error"],
            "packets_p90_abs_transfer_error": floor["p90_abs_error"],
            "packets_median_ci": floor.get("median_ci"),  # absent from older folders
            "packets_p90_ci": floor.get("p90_ci"),
            "replay_same_p90_abs_transfer_error": (floor["replay_same_transfers"] or {}).get(
                "p90_abs_error"),
            "packets_engines_median_abs_transfer_error": (floor.get("engines") or {}).get(
                "median_abs_error"),
            "packets_engines_median_ci": (floor.get("engines") or {}).get("median_ci")}


def repeat_scenario(scenario):
    """The scenario to run again on packets: its first seed, RR alone where it has RR
    (its placements do not depend on timing, so its runs place every request alike)."""
    keys = list(scenario.schedulers)
    return scenario.with_overrides({"seeds": 1, "schedulers": ["rr"] if "rr" in keys else keys})


def repeat_folders(validation: Path) -> list[Path]:
    """The packet runs made again for the floor (the emulation's, or ns-3's perturbed
    ones), oldest first."""
    found = [*(Path(validation) / REPEATS).glob("*-emulation-*"),
             *(Path(validation) / REPEATS).glob("*-ns3-*")]
    return sorted(found, key=lambda f: f.name.split("-", 2)[-1])


NS3_REPEAT_SEEDS = 8  # ns-3's repeats run this many first seeds (seconds each): one seed's
# few dozen transfers leave the floor's p90 too wide to read a target against


def jittered(scenario, draw: int, seeds: int = NS3_REPEAT_SEEDS):
    """ns-3's k-th run again of the first `seeds` seeds, every scheduler (the both-engines
    figure's floor needs the deciding ones): a seed of ns-3 repeats exactly, so each
    repeat perturbs what no flow model resolves, every KV shard starting up to one full
    frame's time on the fabric's fastest link late (ns3.start_jitter_us), a draw of its
    own."""
    from testbed.topologies.fabric import Fabric

    fabric = Fabric(scenario.cluster.spec(), scenario.ns3.scale or scenario.emulation.scale,
                    1.0)
    fastest = max(link.rate_bps for link in fabric.links)
    frame_us = 8 * scenario.emulation.frame_bytes / fastest * 1e6
    return scenario.with_overrides({
        "seeds": seeds, "ns3.start_jitter_us": frame_us,
        "ns3.jitter_seed": draw})


REPEATS = "repeats"  # under a validation folder: its packet runs made again
