"""Where the emulated replica stands for the modelled cluster, and where it cannot.

The replica scales bytes and rates by one factor, so a KV shard keeps its modelled time
at line rate but becomes only a few dozen wire segments, each "worth" WIRE_FRAME / scale
modelled bytes, and a round trip stretches to several modelled milliseconds. The TCP
terms (handshake, slow start, tail: testbed/model/tcp.py) then cost the packets a share
of a transfer's time that the cluster (4 KB segments, microsecond round trips) would not
pay. The validity floor is the transfer size where that extra share equals the tolerance;
it is derived from the two parameter sets, not fitted. Transfers below it are reported
apart and never used to judge or fit the flow model.
"""

from __future__ import annotations

from collections.abc import Sequence

from testbed.flowsim.network import FluidNetwork
from testbed.metrics import percentile
from testbed.model import tcp
from testbed.validate.judging.targets import VALIDITY_TOLERANCE as TOLERANCE


def tier_pairs(spec) -> dict[int, tuple[str, str]]:
    """One (src, dst) pair per tier 1-3, prefill -> decode where the placement has one
    (every path of a tier has the same hops, so any pair gives its geometry)."""
    prefill = {i.name for i in spec.prefill_pool}
    names = [i.name for i in spec.instances]
    pairs: dict[int, tuple[str, str]] = {}
    ordered = sorted(((a, b) for a in names for b in names if a != b),
                     key=lambda p: (p[0] not in prefill, p[1] in prefill))
    for a, b in ordered:
        t = spec.tier(a, b)
        if t > 0 and t not in pairs:
            pairs[t] = (a, b)
    return dict(sorted(pairs.items()))


def floors(scenario, capacity_factor: dict[int, float] | None = None,
           tolerance: float = TOLERANCE) -> dict[int, dict]:
    """Per tier: the replica's and the cluster's base RTT (modelled s) and the smallest
    valid whole transfer (modelled bytes; its shards share the tier's rate). The replica
    takes the scenario's network.tcp hop delay and serialisation (a calibration's fit);
    the cluster its own segment size and microsecond latencies."""
    spec = scenario.cluster.spec()
    emu = scenario.emulation
    t = scenario.network.tcp
    replica = tcp.emulation_equivalent(emu.scale, emu.time_dilation, t.hop_delay_us * 1e-6,
                                       t.init_cwnd, t.serialisation, emu.frame_bytes)
    cluster = tcp.TcpParams(t.mss_bytes, t.init_cwnd, t.handshake_rtts, t.tail_rtts)
    shards = scenario.network.flows_per_transfer or spec.tp
    net_r = FluidNetwork(spec, None, capacity_factor, replica)
    net_c = FluidNetwork(spec, None, capacity_factor, cluster)
    out = {}
    for tier, (a, b) in tier_pairs(spec).items():
        path = spec.paths(a, b)[0]
        rate = min(net_r.links[h].capacity for h in path) / shards
        rtt_r, rtt_c = net_r.path_rtt(path), net_c.path_rtt(path)
        shard_floor = tcp.validity_floor(rate, rtt_r, replica, rtt_c, cluster, tolerance)
        out[tier] = {"rtt_replica_s": rtt_r, "rtt_cluster_s": rtt_c,
                     "shard_floor_bytes": shard_floor,
                     "transfer_floor_bytes": shard_floor * shards,
                     "floor_segments": tcp.segments(shard_floor, emu.scale,
                                                      emu.frame_bytes)}
    return out


def segment_profile(transfer_rows: Sequence[dict], scale: float,
                    frame_bytes: int = tcp.WIRE_FRAME) -> dict:
    """Wire segments per shard on the replica: p10 / p50 / p90 and how many."""
    segs = [tcp.segments(float(r["bytes"]), scale, frame_bytes) for r in transfer_rows]
    return {"n": len(segs), "p10": percentile(segs, 10), "p50": percentile(segs, 50),
            "p90": percentile(segs, 90)}


def above_floor(tier: int, transfer_bytes: float, by_tier: dict[int, dict]) -> bool:
    floor = by_tier.get(tier)
    return floor is None or transfer_bytes >= floor["transfer_floor_bytes"]


def share_above(sizes: Sequence[float], tiers: Sequence[int], by_tier: dict[int, dict]) -> float:
    ok = [above_floor(t, b, by_tier) for b, t in zip(sizes, tiers, strict=True)]
    return sum(ok) / len(ok) if ok else 1.0


def scale_to_clear(scenario, sizes: Sequence[float], tiers: Sequence[int],
                   capacity_factor: dict[int, float] | None = None,
                   share: float = 0.9) -> dict | None:
    """The cheapest setting (least time dilation, so least wall time) that lifts `share`
    of the transfers above their floor: either a higher dilation alone (shortens the
    replica's RTT in modelled time where per-hop delay dominates) or scale and dilation
    raised together (the same packet rate, fewer modelled bytes per segment). None if
    the scenario already clears it; also None if nothing up to 256x does."""
    emu = scenario.emulation
    if share_above(sizes, tiers, floors(scenario, capacity_factor)) >= share:
        return None
    for k in range(1, 9):
        m = 2.0 ** k
        slower = emu.dilation.slower(m).factor
        options = [{"scale": emu.scale, "time_dilation": slower}]
        if emu.scale * m <= 1.0:
            options.append({"scale": emu.scale * m, "time_dilation": slower})
        for opt in options:
            trial = scenario.with_overrides({"emulation.scale": opt["scale"],
                                             "emulation.time_dilation": opt["time_dilation"]})
            got = share_above(sizes, tiers, floors(trial, capacity_factor))
            if got >= share:
                return {**opt, "share": share, "reached": got}
    return None
