"""`testbed calibrate`'s probes on ns-3: the same tier pairs, sizes, shards and competing
sets (validate/engines/fabric_probes.py's constants), so the two packet engines' transfers can be
set side by side. Times are simulated seconds, which are modelled seconds (ns-3 needs no
dilation); the document has calibrate's per-tier shape (`samples`, `spread_samples`,
`repeat_samples`, `competing`)."""

from __future__ import annotations

import statistics

from testbed.ns3sim.packet_network import PacketNetwork
from testbed.validate.engines.fabric_probes import (
    COMPETE_GB,
    COMPETE_MORE,
    COMPETING,
    PROBE_GB,
    REPEAT_GB,
    SPREAD_REPEATS,
)
from testbed.validate.judging.validity import tier_pairs

GAP_S = 0.01  # between one probe transfer's end and the next one's start


class Prober:
    """Transfers on an otherwise idle ns-3 fabric, one set at a time."""

    def __init__(self, scenario, program, pair: tuple[str, str], seed: int = 1):
        self.now = 0.0
        self.pair = pair
        self.net = PacketNetwork(scenario, seed, program, clock=lambda: self.now)
        spec = scenario.cluster.spec()
        self.shards = scenario.network.flows_per_transfer or spec.tp
        self.persistent = scenario.emulation.kv_connections == "persistent"

    def close(self) -> None:
        self.net.close()

    def _run(self, plan: list[tuple[float, float]]) -> list[tuple[float, list[float]]]:
        """Transfers (modelled bytes, start offset s) from self.now; each one's start and
        its shards' ends, in seconds from the set's start."""
        src, dst = self.pair
        t0 = self.now
        pending = sorted((t0 + offset, j) for j, (_, offset) in enumerate(plan))
        path = self.net.transfer_paths(src, dst, "per-pair", 1)[0]
        owner: dict[int, int] = {}
        ends: list[list[float]] = [[] for _ in plan]
        while pending or len(owner):
            due = pending[0][0] if pending else t0 + 3600.0
            finished = self.net.run_until(due)
            if finished is None and not pending:
                raise RuntimeError(
                    f"ns-3 probe {src} -> {dst}: {len(owner)} flow(s) still unfinished an "
                    "hour of simulated time after the set started (a stalled TCP "
                    "connection in ns-3 at these emulation.* settings)")
            if finished is None:
                self.now = due
                _, j = pending.pop(0)
                size = plan[j][0]
                for k in range(self.shards):
                    flow = self.net.add_flow(path, size / self.shards, self.now,
                                             shard=(k, self.shards))
                    owner[flow.flow_id] = j
                continue
            self.now = finished
            for flow in self.net.pop_finished(finished):
                ends[owner.pop(flow.flow_id)].append(finished - t0)
        self.net.stats.clear()
        self.now += GAP_S
        return [(offset, sorted(e)) for (_, offset), e in zip(plan, ends, strict=True)]

    def _warm(self, n: int) -> None:
        """Kept connections open before a timed set, as the emulation's probe opens them:
        an untimed transfer of one byte per shard, n at once."""
        if self.persistent:
            self._run([(self.shards / self.net.scale, 0.0)] * n)

    def lone(self, sizes: list[float]) -> list[dict]:
        self._warm(1)
        out = []
        for size in sizes:
            (_, ends), = self._run([(size, 0.0)])
            out.append({"bytes": size, "seconds": ends[-1], "shards": ends})
        return out

    def competing(self, size: float, n: int, spacing_s: float = 0.0) -> dict:
        self._warm(n)
        got = self._run([(size, j * spacing_s) for j in range(n)])
        return {"bytes": size, "competing": n, "asked_spacing_s": spacing_s,
                "starts": [s for s, _ in got], "seconds": [e[-1] for _, e in got]}


def probe_tiers(scenario, program, on_step=None) -> dict:
    """Every tier's lone, repeated and competing probes on ns-3 (calibrate's plan)."""
    out = {}
    for tier, pair in tier_pairs(scenario.cluster.spec()).items():
        if on_step:
            on_step(f"ns-3 probes, tier {tier} ({pair[0]} -> {pair[1]})")
        prober = Prober(scenario, program, pair)
        try:
            doc = {"pair": list(pair), "samples": prober.lone([g * 1e9 for g in PROBE_GB]),
                   "spread_samples": prober.lone([COMPETE_GB * 1e9] * SPREAD_REPEATS)}
            doc["repeat_samples"] = [{"bytes": d["bytes"], "seconds": d["seconds"]}
                                     for d in prober.lone([g * 1e9 for g in REPEAT_GB])]
            lone = statistics.median(d["seconds"] for d in doc["spread_samples"])
            doc["competing"] = [prober.competing(COMPETE_GB * 1e9, n) for n in COMPETING] + [
                prober.competing(gb * 1e9, n, spacing * lone) for gb, n, spacing in COMPETE_MORE]
        finally:
            prober.close()
        out[str(tier)] = doc
    return out
