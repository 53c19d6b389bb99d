"""The flow model's matched scenario of a packet run: the same scenario as the packets ran it."""

from __future__ import annotations

from testbed.topologies.routing import packet_ecmp


def flow_scenario(scenario, capacity_factor: dict[int, float] | None = None,
              tcp_fit: dict | None = None, beside: tuple[str, ...] = ()):
    """The flow-model scenario that matches what the packets did; with `tcp_fit` (the
    calibration's "tcp" section, or {} for the derived defaults) it has the TCP terms of
    the replica as fitted (handshake, slow start, tail, shard spread), and the fitted
    values of the network.tcp fields named in `beside` too (terms judged beside the
    verdict's model, not in it: link contention, the join stall; validate/comparison/beside.py)."""
    over: dict = {}
    if packet_ecmp(scenario.network.ecmp) != scenario.network.ecmp:
        over["network.ecmp"] = packet_ecmp(scenario.network.ecmp)
    if capacity_factor is not None:
        over["network.capacity_factor"] = {int(k): float(v) for k, v in capacity_factor.items()}
    if tcp_fit is not None:
        over["network.flow_model"] = "tcp"
        over["network.tcp.replica"] = True
        over["network.tcp.hop_delay_us"] = float(tcp_fit.get("hop_delay_s", 0.0)) * 1e6
        over["network.tcp.serialisation"] = float(tcp_fit.get("serialisation", 1.0))
        over["network.tcp.shard_spread"] = float(tcp_fit.get("shard_spread", 0.0))
        for name in beside:
            over[f"network.tcp.{name}"] = float(tcp_fit.get(name, 0.0))
    return scenario.with_overrides(over) if over else scenario


def replay_scenario(scenario, capacity_factor: dict[int, float], tcp_fit: dict):
    """The verdict's model (TCP terms) as it replays the packets' transfer records: those
    start once connect() returns (workers/kvstream.py), so the handshake is not charged
    again; the engines' own runs charge it."""
    return flow_scenario(scenario, capacity_factor, tcp_fit).with_overrides(
        {"network.tcp.handshake_rtts": 0})
