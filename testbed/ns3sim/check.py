"""What the ns-3 engine refuses before anything runs: a scenario field the emulation
honours that ns-3 does not model, named, rather than ignored."""

from __future__ import annotations

from testbed.scenario import ScenarioError


def check_scenario(scenario) -> None:
    """Raise ScenarioError naming the first field of any sweep point ns-3 cannot honour."""
    for point, point_scenario in scenario.points():
        where = f"{scenario.name}: " + (f"sweep point {point}: " if point else "")
        if roce(point_scenario):
            check_roce(point_scenario, where)
        if point_scenario.emulation.capture:
            raise ScenarioError(f"{where}emulation.capture: the ns-3 engine records no "
                                "packet captures (the emulation does: testbed emulate "
                                "--capture); remove the field for --engine ns3")


ROCE_REFUSED = {  # TCP's fields with no RoCE meaning, and why
    "ecn_k_packets": "DCTCP's step marking; RoCE marks by RED (ns3.roce.kmin_kb, kmax_kb, pmax)",
    "rto_min_ms": "TCP's timeout floor; RoCE's go-back-N has its own (ns3.roce.timeout_ms)",
    "delayed_ack_ms": "TCP's delayed ACK; a RoCE receiver ACKs every ns3.roce.ack_every packets",
    "socket_buffer_bytes": "TCP's buffers; a RoCE write has none (the NIC paces it)",
}


def roce(scenario) -> bool:
    return scenario.ns3.transport == "roce"


def check_roce(scenario, where: str = "") -> None:
    """RoCE beside a field that only means something to TCP is refused by name."""
    for name, why in ROCE_REFUSED.items():
        if getattr(scenario.ns3, name) is not None:
            raise ScenarioError(f"{where}ns3.{name}: {why}; remove it for ns3.transport roce")
    if scenario.emulation.kv_connections == "per-shard":
        raise ScenarioError(f"{where}emulation.kv_connections per-shard: a TCP connection per "
                            "shard; under ns3.transport roce every shard is a queue pair of "
                            "its own already: remove it")


def roce_packets(scenario, packets: str) -> tuple[str, str | None]:
    """(the packet engines a validation runs, a note): RoCE runs on ns-3 alone (the
    emulation's hosts run Linux's TCP), refused on the emulation by name."""
    if not any(roce(s) for _, s in scenario.points()):
        return packets, None
    if packets == "emulation":
        raise ScenarioError(f"{scenario.name}: ns3.transport roce: the emulation's hosts run "
                            "Linux's TCP (no RDMA NICs, PFC or DCQCN): --packets ns3")
    if packets == "both":
        return "ns3", ("ns3.transport roce: packets on ns-3 alone (the emulation's hosts run "
                       "Linux's TCP), no ns-3 against the emulation")
    return packets, None
