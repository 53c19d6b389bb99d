"""An emulation run's own transfers on ns-3: the emulation's twin fed the emulation's
schedule, so the two packet engines are judged transfer by transfer, the network alone.

Every KV shard the emulation's records hold starts at its recorded modelled instant, from
the same host to the same host, on a pooled connection of the same shard index, in the KV
class; the run's standing background streams run from the start. Its path is the fabric's
per-pair hash, which is the controller's own (routing.pair_port), so a per-pair run's
recorded path is taken again (`replay` checks it). The connections a shard finds open on
the emulation are open here too: the emulation's record starts once connect() returned,
so every (sender, receiver, shard) connection the run used is opened before the first
transfer, as many at once as the run ever had busy; the Transfer Engine's lanes open on
their first write, as the engine's do (its records start at the write's submission).
What ns-3 decides is the rest: when
each shard's last byte and the receiver's reply land, and what its sender's TCP met.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from testbed.flowsim.events import DrivenLoop
from testbed.ns3sim.packet_network import PacketNetwork
from testbed.ns3sim.program import program_path
from testbed.ns3sim.simulation import background_plan, stream_bps
from testbed.topologies.routing import path_text
from testbed.topologies.traffic_classes import kv_lanes

DEBUG = bool(os.environ.get("NETKV_REPLAY_DEBUG"))  # print stalled sockets on a lost shard
DRAIN_S = 600.0  # modelled seconds past the last start before a shard counts as lost
WARM_AT = 0.0  # when the kept connections start opening (before any transfer of a run)
WARM_GAP_S = 0.005  # between two of them (all at once, their handshakes would collide)


def emulation_twin(scenario, fresh: bool = False):
    """The scenario as ns-3's twin of its emulation runs: the emulation's replica (its
    scale, in modelled time) and the kernel's wall-time constants at its time dilation.
    `fresh`: ns-3's own settings as they are today, not as a kept run's scenario froze
    them (the emulation never reads them: a replay takes today's twin)."""
    emu = scenario.emulation
    if fresh:
        scenario = scenario.with_overrides({"ns3": {}})
    return scenario.with_overrides({"ns3.scale": emu.scale,
                                    "ns3.twin_dilation": emu.time_dilation,
                                    "emulation.time_dilation": 1.0})


def busiest(rows: Sequence[dict]) -> dict[tuple[str, str, int], int]:
    """(src, dst, shard) -> how many of those connections the run had busy at once."""
    spans: dict[tuple[str, str, int], list[tuple[float, int]]] = {}
    for r in rows:
        key = (str(r["src"]), str(r["dst"]), int(r["shard"]))
        spans.setdefault(key, []).extend([(float(r["start"]), 1), (float(r["end"]), -1)])
    out = {}
    for key, events in spans.items():
        live = most = 0
        for _, step in sorted(events, key=lambda e: (e[0], e[1])):
            live += step
            most = max(most, live)
        out[key] = max(1, most)
    return out


def replay(twin, rows: Sequence[dict], seed: int, program=None) -> list[dict]:
    """ns-3's run of `rows` (an emulation run's transfers.csv; `twin`: emulation_twin of
    its scenario): the rows with ns-3's end, path and TCP counters; a shard that never
    ended has end None."""
    program = program or program_path()
    loop = DrivenLoop()
    net = PacketNetwork(twin, seed, program, clock=lambda: loop.now)
    owner: dict[int, dict] = {}
    out: list[dict] = []

    def landed() -> None:
        for flow in net.pop_finished(loop.now):
            tcp = net.stats.pop(flow.flow_id)
            row = owner.pop(flow.flow_id, None)
            if row is not None:
                out.append({**row, "end": flow.end, "path": path_text(tcp.path),
                            "retrans_segs": tcp.retrans_segs, "timeouts": tcp.timeouts,
                            "timeout_s": tcp.timeout_s, "rtt_s": tcp.rtt_s,
                            "min_rtt_s": tcp.min_rtt_s, "cpu_wait_s": None})

    loop.run_until = net.run_until
    loop.on_network = landed
    try:
        spec = twin.cluster.spec()
        for src, dst, tier, f in background_plan(twin):
            net.set_stream(src, dst, stream_bps(spec, f, tier, net.scale), WARM_AT)
        shards = max((int(r["shard"]) + 1 for r in rows), default=1)
        emu = twin.emulation
        warm = [] if kv_lanes(emu.kv_transport, emu.kv_connections) else [
            key for key, n in sorted(busiest(rows).items()) for _ in range(n)]
        first = min((float(r["start"]) for r in rows), default=1.0)
        gap = min(WARM_GAP_S, max(first - WARM_AT, 0.0) / (len(warm) + 1))
        for k, (src, dst, shard) in enumerate(warm):  # a byte each: the handshake, off
            loop.at(WARM_AT + k * gap,                 # the record, one at a time
                    lambda src=src, dst=dst, shard=shard: net.add_flow(
                        [(src, dst)], 1 / net.scale, loop.now, shard=(shard, shards)))
        for row in sorted(rows, key=lambda r: float(r["start"])):
            def start(row=row) -> None:
                flow = net.add_flow([(str(row["src"]), str(row["dst"]))], float(row["bytes"]),
                                    loop.now, shard=(int(row["shard"]), shards))
                owner[flow.flow_id] = row
            loop.at(max(float(row["start"]), WARM_AT), start)
        last = max((float(r["start"]) for r in rows), default=0.0)
        loop.run(until=last + DRAIN_S, stop=lambda: not owner and not loop.pending)
    finally:
        if owner and DEBUG:
            print("\n".join(net.proc.ask("sockets")), file=sys.stderr)
        net.close()
    out += [{**row, "end": None} for row in owner.values()]
    return sorted(out, key=lambda r: (str(r["request"]), int(r["shard"])))


def lost(rows: Sequence[dict]) -> int:
    return sum(r["end"] is None or math.isnan(float(r["end"])) for r in rows)


def replay_cell(task: tuple[str, str, dict]) -> list[dict]:
    """One cell of an emulation run on ns-3 (a process's task): (its point's scenario
    file, its cell folder seed<N>/, overrides of the twin's fields), ns-3's rows."""
    from testbed.records import read_csv
    from testbed.scenario import load_scenario

    scenario_file, cell, overrides = task
    twin = emulation_twin(load_scenario(scenario_file), fresh=True)
    return replay(twin.with_overrides(overrides) if overrides else twin,
                  read_csv(Path(cell) / "transfers.csv"), int(cell.rsplit("seed", 1)[1]))


def twin_replica(scenario, program=None) -> dict:
    """The replica ns-3's twin of `scenario`'s emulation builds (replica_record's shape)."""
    net = PacketNetwork(emulation_twin(scenario, fresh=True), 1, program or program_path(),
                        clock=lambda: 0.0)
    try:
        return net.applied_replica()
    finally:
        net.close()
