"""The replay's error split by a transfer's arrival order on its path."""

from __future__ import annotations

import math

from testbed.records import write_csv
from testbed.validate.judging.arrival import arrival_orders, by_arrival

FIELDS = ["request", "shard", "src", "dst", "tier", "path", "bytes", "start", "end"]
PATH = "i0>tor0>agg0>tor1>i6"
OTHER = "i1>tor0>agg1>tor2>i9"  # shares no directed link with PATH


def shards(request, start, end, path=PATH, n=2, size=1e9):
    return [{"request": request, "shard": k, "src": "i0", "dst": "i6", "tier": 2,
             "path": path, "bytes": size, "start": start, "end": end + 0.01 * k}
            for k in range(n)]


def run_rows():
    return (shards("a", 0.0, 1.0)  # b and c come while it runs: first
            + shards("b", 0.5, 2.0)  # a was there, c comes: both
            + shards("c", 1.5, 2.5)  # b was there, none after: late
            + shards("d", 0.2, 0.9, path=OTHER)  # overlaps in time, not in links: alone
            + shards("e", 3.0, 3.99)  # after all ended: alone (its last shard ends at 4.0)
            + shards("f", 4.0, 5.0)  # starts as e ends: touching is not sharing
            + shards("g", 6.0, 7.0, size=1e8))  # alone, and below the floor below


def test_each_transfer_gets_its_arrival_order():
    assert arrival_orders(run_rows()) == {"a": "first", "b": "both", "c": "late",
                                          "d": "alone", "e": "alone", "f": "alone",
                                          "g": "alone"}


def test_transfers_that_start_together_were_both_there_when_the_other_started():
    rows = shards("x", 0.0, 1.0) + shards("y", 0.0, 2.0)
    assert arrival_orders(rows) == {"x": "late", "y": "late"}


def test_the_error_is_split_by_order_above_the_floor_only(tmp_path):
    cell = tmp_path / "cells" / "000-base" / "rr" / "seed1"
    cell.mkdir(parents=True)
    rows = run_rows()
    write_csv(cell / "transfers.csv", rows, FIELDS)
    # the model: a 20% slower than packets, c 10% faster, the rest exact
    scale = {"a": 1.2, "c": 0.9}
    model = [{**r, "end": r["start"] + (r["end"] - r["start"]) * scale.get(r["request"], 1.0)}
             for r in rows]
    floors = {2: {"transfer_floor_bytes": 1.5e9}}
    got = by_arrival({"k": cell}, {"k": model}, floors)
    assert got["first"]["n"] == 1 and math.isclose(got["first"]["mean_error"], 0.2)
    assert got["late"]["n"] == 1 and math.isclose(got["late"]["mean_error"], -0.1)
    assert got["both"]["n"] == 1 and abs(got["both"]["mean_error"]) < 1e-9
    assert got["alone"]["n"] == 3  # d, e and f: g is below the floor
    # a floor above every transfer leaves nothing to judge
    empty = by_arrival({"k": cell}, {"k": model}, {2: {"transfer_floor_bytes": 1e12}})
    assert all(g["n"] == 0 for g in empty.values())
