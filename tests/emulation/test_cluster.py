"""Mininet's cluster edition drives the fabric. On this machine an inventory can name one
server, localhost (one kernel, and no ip_gre); inside the vm tests' first VM,
NETKV_TEST_CLUSTER names an inventory of both VMs and the same test spreads the fabric
over two kernels joined by GRE (NETKV_TEST_TUNNEL), the controller on the first VM
(listening on NETKV_TEST_BIND, its address on the VMs' private network), and
NETKV_TEST_KV_TRANSPORT=mooncake moves the run's KV through Mooncake's Transfer Engine,
whose unmarked sockets every server's host NICs must classify."""

from __future__ import annotations

import csv
import json
import os
import secrets
import subprocess
from pathlib import Path

import pytest

from testbed.emulation import cleanup
from testbed.emulation.multi_machine import _pod_placer, servers_from_inventory
from testbed.scenario import load_scenario
from tests.conftest import TRACE
from tests.emulation.conftest import SLOWDOWN, write_small
from tests.emulation.helpers import iperf

pytestmark = [pytest.mark.root, pytest.mark.slow]


def _inventory(tmp_path):
    given = os.environ.get("NETKV_TEST_CLUSTER")
    if given:
        return given, os.environ.get("NETKV_TEST_TUNNEL", "gre"), {
            "emulation.bind": os.environ["NETKV_TEST_BIND"],
            "emulation.token": secrets.token_hex(16)}
    inv = tmp_path / "inventory.yml"
    inv.write_text("all:\n  hosts:\n    localhost: {ansible_connection: local}\n")
    return inv, "ssh", {}


def _remote_leftovers(servers, name: str) -> str:
    """`testbed clean --dry-run` on a remote server, through the same SSH Mininet used."""
    who = f"{servers.user}@{servers.ips[name]}" if servers.user else servers.ips[name]
    return subprocess.run(
        ["ssh", "-o", "BatchMode=yes", who, "sudo",
         f"{servers.project_dir[name]}/.venv/bin/testbed", "clean", "--dry-run"],
        capture_output=True, text=True, timeout=120).stdout


def _listed() -> str:
    """What find_leftovers sees, with each process's command line and parent (a leftover
    reparented to init is no descendant of the run that made it)."""
    left = cleanup.find_leftovers()
    procs = []
    for pid in left.processes:
        try:
            proc = Path(f"/proc/{pid}")
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[1]
        except OSError:
            cmd, ppid = "(gone)", "?"
        procs.append(f"{pid} (parent {ppid}, this test {os.getpid()}): {cmd[:160]}")
    return f"{left.describe()}: {left}; " + "; ".join(procs)


def _check_the_fabric(network, sc, servers) -> str:
    """With the fabric up: every server holds nodes, every host pings every other, and a
    stream whose every path crosses servers (with one server: a cross-pod stream) runs at
    its shaped rate. Returns the stream's line for the log."""
    def server(node):
        return getattr(network.net.get(node), "server", None) or "localhost"

    placed = {server(n) for n in [*network.fabric.switches, *network.fabric.hosts]}
    assert placed == set(servers.names), placed  # the placement used every server
    # a ping across servers on a slow machine (two software-emulated VMs, GRE between
    # them) may take longer than 2 s: the slowdown scales it as it does every wait
    timeout = max(2, round(2 * SLOWDOWN))
    lost = [(a, b) for a, b, got in network.net.pingFull(timeout=timeout) if not got[1]]

    def again(a, b) -> str:  # a slow first ARP through the controller, or no route?
        out = a.cmd(f"ping -c1 -W {timeout} {b.IP()}")
        return "answered" if ", 1 received" in out else "lost"

    assert not lost, f"pings unanswered within {timeout} s: " + ", ".join(
        f"{a.name} ({server(a.name)}) -> {b.name} ({server(b.name)}), again: {again(a, b)}"
        for a, b in lost)
    hosts = sorted(network.fabric.hosts, key=lambda h: int(h[1:]))
    src = hosts[0]

    def crossings(dst):  # the servers on each equal-cost path src -> dst
        return [{server(n) for hop in p for n in hop if n in network.net}
                for p in network.fabric.spec.paths(src, dst)]

    dst = next((h for h in reversed(hosts) if server(h) != server(src)), None) or next(
        (h for h in reversed(hosts) if all(len(c) > 1 for c in crossings(h))), hosts[-1])
    tier = network.fabric.spec.tier(src, dst)
    on_paths = set().union(*crossings(dst))
    if len(servers.names) > 1:
        assert all(len(c) > 1 for c in crossings(dst)), crossings(dst)
    bps = iperf(network, src, dst, seconds=4, extra="-O 1")
    expected = network.fabric.rate_bps(sc.cluster.spec().tier_bandwidth_gbps[tier])
    line = (f"{src}@{server(src)} -> {dst}@{server(dst)} tier {tier} through "
            f"{'+'.join(sorted(on_paths))}: {bps / 1e6:.2f} of {expected / 1e6:.2f} Mbit/s")
    print(line)
    assert 0.85 * expected <= bps <= 1.05 * expected, line
    return line


def test_one_fabric_over_the_servers_passes_pingall_a_shaped_stream_and_a_run(tmp_path):
    """`testbed.emulate(..., cluster=INVENTORY)` builds one fabric over the servers (a pod
    on each, by default). With it up (on_fabric): pingall and a stream across servers at
    its shaped rate. Then a run: each prefill/decode worker on its host's server (over
    SSH there), reaching the router by TCP on emulation.bind; telemetry and the fidelity
    monitor read the tc counters of every server's switches. Nothing is left anywhere."""
    from testbed.api import emulate

    inv, tunnel, extra = _inventory(tmp_path)
    servers = servers_from_inventory(inv)
    assert servers.names[0] == "localhost"
    transport = os.environ.get("NETKV_TEST_KV_TRANSPORT", "pusher")
    extra = {**extra, "emulation.kv_transport": transport}
    path = write_small(tmp_path, TRACE, {**extra, "schedulers": ["netkv-full"], "seeds": 1,
                                         "drain_s": 60, "workload.profile": "rag",
                                         "workload.warmup_s": 1, "workload.measure_s": 3})
    sc = load_scenario(path)
    assert cleanup.find_leftovers().empty, f"left before this run: {_listed()}"
    checked = []
    run = emulate(sc, tmp_path / "results", cluster=inv, tunnel=tunnel,
                  on_fabric=lambda network, _: checked.append(
                      _check_the_fabric(network, sc, servers)))
    assert len(checked) == 1  # one sweep point, one fabric
    assert cleanup.find_leftovers().empty, f"left by the run: {_listed()}"
    remote = servers.names[1:]
    for name in remote:
        assert "nothing to clean" in _remote_leftovers(servers, name), name
    (seed1,) = run.cells  # cells/<point>/netkv-full/seed1
    result = json.loads((seed1 / "router.json").read_text())
    assert result["outcome"] == "finished" and not result["errors"], result["errors"]
    assert {r["state"] for r in result["requests"]} == {"completed"}
    assert result["wire_bytes_received"] == result["wire_bytes_expected"] > 0
    # the workers of the hosts placed on another machine had their clock measured there
    # (and a start on it); this machine's did not
    placer = _pod_placer(sc.fabric().spec)(servers=servers.names)
    elsewhere = {h for h in sc.fabric().hosts if placer.place(h) != "localhost"}
    assert bool(elsewhere) == bool(remote)
    assert set(result["clock_offsets_s"]) == elsewhere, result["clock_offsets_s"]
    print("clock offsets (s):", result["clock_offsets_s"])
    with (seed1 / "links.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    seen = {row["link"] for row in rows}
    # the KV class carried the transfers on every server, whichever sender moved them
    kv = sum(float(r["kv_util"]) for r in rows)
    assert kv > 0 and sum(float(r["bg_util"]) for r in rows) < 0.01 * kv, transport
    fabric = sc.fabric()
    every = {f"{n}>{link.peer_of(n)}" for n, _, link in fabric.egress_interfaces()
             if n in fabric.switches}
    assert seen == every, sorted(every - seen)  # remote switches' ports were read too
