"""Replay a run's own transfers (start, size, endpoints) through the flow model.

This separates network-model error from scheduling divergence: the flow model sees
exactly the transfers the packets carried, at the same times, instead of making its own
decisions. Output rows have the transfers.csv shape with the model's end times.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from testbed.flowsim.events import EventLoop
from testbed.flowsim.model_network import flow_network
from testbed.flowsim.pair_lanes import Lanes
from testbed.flowsim.transfers import engine_lanes
from testbed.model.extensions.network_models import MAX_MIN
from testbed.model.tcp import TcpParams
from testbed.records import read_csv
from testbed.topologies.fattree import FatTreeSpec
from testbed.topologies.routing import packet_ecmp, path_hops
from testbed.validate.judging import model_errors


def replay_transfers(spec: FatTreeSpec, transfers: Sequence[dict], ecmp: str = "per-transfer",
                     seed: int = 0, background: dict[int, float] | None = None,
                     capacity_factor: dict[int, float] | None = None,
                     tcp: TcpParams | None = None, rtt_exponent: float = 0.0,
                     model: str = MAX_MIN, lanes: int = 0) -> list[dict]:
    """Every row needs request, shard, src, dst, bytes, start; returns rows with `end`.

    A row's recorded `path` (a>b>c) is followed when present; otherwise `ecmp` picks.
    `capacity_factor` (tier -> factor) is a calibration of the link rates; `tcp` adds
    the TCP terms (testbed/model/tcp.py) to the fluid model; `model`, a network model in
    place of max-min (testbed/model/extensions/network_models.py); `lanes`, the Transfer
    Engine's connections per pair (a shard that finds them busy waits its turn)."""
    loop = EventLoop()
    net = flow_network(spec, random.Random(seed), capacity_factor, tcp, rtt_exponent, model)
    if background:
        net.set_background({hop: background.get(link.tier, 0.0)
                            for hop, link in net.links.items()}, 0.0)
    paths: dict[str, list] = {}
    out: list[dict] = []
    ledger = Lanes(lanes, first_alone=True)  # per (src, dst); records start at hand-over
    version = [0]

    def reschedule() -> None:
        version[0] += 1
        mine = version[0]
        t = net.next_completion()
        if t is not None:
            loop.at(max(t, loop.now), lambda: finish(mine))

    def finish(mine: int) -> None:
        if mine != version[0]:
            return
        freed: dict[tuple[str, str], int] = {}
        for flow in net.pop_finished(loop.now):
            out.append({**flow.tag, "end": loop.now})
            pair = (str(flow.tag["src"]), str(flow.tag["dst"]))
            freed[pair] = freed.get(pair, 0) + 1
        for pair in sorted(freed):
            for row in ledger.release(pair, freed[pair]):
                start(row)
        reschedule()

    def arrive(row: dict) -> None:
        """A shard at its recorded start: sent, or waiting for its pair's lanes."""
        if float(row["bytes"]) <= 0:
            start(row)
            return
        for ready in ledger.admit((str(row["src"]), str(row["dst"])), [row]):
            start(ready)

    def start(row: dict) -> None:
        path = _shard_path(net, row, ecmp, paths)
        size = float(row["bytes"])
        if size <= 0:
            out.append({**row, "end": loop.now})
            return
        net.add_flow(path, size, loop.now, tag=dict(row),
                     shard=(int(row["shard"]), shards[str(row["request"])]),
                     group=str(row["request"]))
        reschedule()

    shards: dict[str, int] = {}
    for row in transfers:
        shards[str(row["request"])] = shards.get(str(row["request"]), 0) + 1
    for row in sorted(transfers, key=lambda r: float(r["start"])):
        loop.at(float(row["start"]), lambda row=row: arrive(row))
    loop.run(until=float("inf"))
    return sorted(out, key=lambda r: (str(r["request"]), int(r["shard"])))


def _shard_path(net, row: dict, ecmp: str, drawn: dict[str, list]) -> list:
    """The path the packets took (the row's a>b>c), else ecmp's: per transfer, one draw
    its shards share (`drawn`: request -> it)."""
    recorded = str(row.get("path") or "")
    if recorded:
        return path_hops(recorded)
    src, dst = str(row["src"]), str(row["dst"])
    if ecmp != "per-transfer":
        (path,) = net.transfer_paths(src, dst, ecmp, 1)
        return path
    if str(row["request"]) not in drawn:
        (drawn[str(row["request"])],) = net.transfer_paths(src, dst, ecmp, 1)
    return drawn[str(row["request"])]


def replay_cells(scenario, emu_cells: dict[str, Path],
                 capacity_factor: dict[int, float] | None) -> dict[str, list[dict]]:
    """`scenario` decides the flow model (fluid or tcp: flow_scenario; network.model)."""
    bg = scenario.network.background
    out = {}
    for key, cell in emu_cells.items():
        rows = read_csv(cell / "transfers.csv")
        out[key] = replay_transfers(scenario.cluster.spec(), rows,
                                    ecmp=packet_ecmp(scenario.network.ecmp),
                                    background={1: bg.tier1, 2: bg.tier2, 3: bg.tier3},
                                    capacity_factor=capacity_factor,
                                    tcp=scenario.tcp_params(),
                                    rtt_exponent=scenario.network.tcp.rtt_exponent,
                                    model=scenario.network.model,
                                    lanes=engine_lanes(scenario))
    return out


def whole_pairs(ref_cells: dict[str, Path], model_rows: dict[str, list[dict]]) -> list:
    """Pairs of whole transfers (first shard's start to slowest shard's end)."""
    pairs = []
    for key, cell in ref_cells.items():
        if key in model_rows:
            got, _ = model_errors.match_transfers(
                model_errors.whole_transfers(read_csv(cell / "transfers.csv")),
                model_errors.whole_transfers(model_rows[key]))
            pairs.extend(got)
    return pairs
