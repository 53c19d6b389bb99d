"""Traffic helpers for the fabric tests: iperf3 between Mininet hosts, counters, Jain."""

from __future__ import annotations

import json
import time

from testbed.datapath import tc


def iperf(network, src: str, dst: str, seconds: float = 4, port: int = 5201,
          extra: str = "") -> float:
    """Received bits/s of one iperf3 run from src to dst."""
    server, client = network.host(dst), network.host(src)
    server.cmd(f"iperf3 -s -D -1 -p {port}")
    time.sleep(0.3)
    out = client.cmd(f"iperf3 -c {server.IP()} -p {port} -t {seconds} -J {extra}")
    return json.loads(out)["end"]["sum_received"]["bits_per_second"]


def start_iperf(network, src: str, dst: str, port: int, args: str):
    """Background iperf3 client (returns the Popen); the server serves one test."""
    return start_iperfs(network, [(src, dst, port)], args)[0]


def start_iperfs(network, flows: list[tuple[str, str, int]], args: str) -> list:
    """Start every server first, then every client back to back: the flows overlap fully."""
    for _, dst, port in flows:
        network.host(dst).cmd(f"iperf3 -s -D -1 -p {port}")
    time.sleep(0.3)
    return [network.host(src).popen(
        f"iperf3 -c {network.host(dst).IP()} -p {port} -J {args}".split())
        for src, dst, port in flows]


def egress_bytes(network, nodes: set[str]) -> dict[str, int]:
    """Total bytes sent out of every egress interface of the given switches."""
    intfs = [i for n, i, _ in network.fabric.egress_interfaces() if n in nodes]
    counters = tc.all_counters(intfs, netns=network.interface_netns)
    return {i: sum(c["bytes"] for c in per.values()) for i, per in counters.items()}


def jain(xs: list[float]) -> float:
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def capture_command(network, intf: str, out) -> list[str]:
    """tcpdump on a switch port, inside the namespace of the OVS daemon that holds it."""
    cmd = ["tcpdump", "-i", intf, "-U", "-w", str(out), "tcp"]
    where = network.interface_netns.get(intf)
    return ["nsenter", f"--net={where}", *cmd] if where else cmd
