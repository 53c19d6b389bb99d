"""The flow model's error by a transfer's arrival order on its path.

Max-min sharing gives transfers that meet on a link equal shares from the instant they
meet, so of two that compete the one that came first ends later than it would alone and
both end as a work-conserving link ends them. Packets need not share that way (a sender
in slow start takes its share over round trips; a standing window keeps its place in a
short queue), and the difference lands on the transfer that was there first. So the
report splits the replay's error on whole transfers by where each one stood:

- alone: no other request's transfer shared a link with it while it was in flight;
- first: none was in flight on its links when it started, others came while it ran;
- late: others were in flight when it started, none came after;
- both: others were there when it started, and more came.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from testbed.records import read_csv
from testbed.topologies.routing import path_hops
from testbed.validate.judging import model_errors, validity

ORDERS = ("alone", "first", "late", "both")


def arrival_orders(rows: Sequence[dict]) -> dict[str, str]:
    """Request -> its whole transfer's arrival order, from one run's transfers.csv rows
    (shards with start, end and the path they took, a>b>c)."""
    return {request: order(*near) for request, near in neighbours(rows).items()}


def order(before: set[str], after: set[str]) -> str:
    """The arrival order of a transfer with these neighbours (see neighbours)."""
    return "both" if before and after else "late" if before else "first" if after else "alone"


def neighbours(rows: Sequence[dict]) -> dict[str, tuple[set[str], set[str]]]:
    """Request -> the other requests whose transfers shared a link with its own while it
    was in flight: those there when it started (or starting with it), and those that
    came after."""
    links: dict[str, set[tuple[str, str]]] = {}
    for row in rows:
        links.setdefault(str(row["request"]), set()).update(
            path_hops(str(row.get("path") or "")))
    whole = sorted((float(r["start"]), float(r["end"]), r["request"])
                   for r in model_errors.whole_transfers(rows))
    out = {}
    for start, end, request in whole:
        mine = links.get(request, set())
        before: set[str] = set()
        after: set[str] = set()
        for other_start, other_end, other in whole:  # sorted by start
            if other_start >= end:
                break
            if other == request or other_end <= start or not links.get(other, set()) & mine:
                continue
            (before if other_start <= start else after).add(other)
        out[request] = (before, after)
    return out


def by_arrival(ref_cells: Mapping[str, Path], model_rows: Mapping[str, list[dict]],
               floors: Mapping[int, dict]) -> dict[str, dict]:
    """The model's error on whole transfers above the validity floor, per arrival
    order: n, median and p90 |error|, mean error (positive: the model was slower)."""
    errors: dict[str, list[float]] = {order: [] for order in ORDERS}
    for key, cell in ref_cells.items():
        if key not in model_rows:
            continue
        rows = read_csv(cell / "transfers.csv")
        orders = arrival_orders(rows)
        pairs, _ = model_errors.match_transfers(model_errors.whole_transfers(rows),
                                           model_errors.whole_transfers(model_rows[key]))
        for pair in pairs:
            if validity.above_floor(pair.tier, pair.size_bytes, floors):
                errors[orders[pair.request]].append(pair.error)
    return {order: model_errors.error_stats(e) for order, e in errors.items()}
