"""Mininet's cluster edition drives the fabric. On this machine an inventory can name one
server, localhost (one kernel, and no ip_gre); inside the vm tests' first VM,
NETKV_TEST_CLUSTER names an inventory of both VMs and the same test spreads the fabric
over two kernels joined by GRE (NETKV_TEST_TUNNEL), the controller on the first VM
(listening on NETKV_TEST_BIND, its address on the VMs' private network)."""

from __future__ import annotations

import csv
import json
import os
import secrets
import subprocess
import sys

import pytest

from testbed.emulation import cleanup
from testbed.emulation.cluster import servers_from_inventory
from testbed.scenario import load_scenario
from tests.conftest import ROOT, TRACE
from tests.emulation.conftest import write_small
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


def test_cluster_edition_fabric_passes_pingall_and_a_shaped_tcp_stream(tmp_path):
    from testbed.emulation.cluster import ClusterNetwork

    inv, tunnel, extra = _inventory(tmp_path)
    servers = servers_from_inventory(inv)
    assert servers.names[0] == "localhost"
    path = write_small(tmp_path, TRACE, extra)
    sc = load_scenario(path)
    network = ClusterNetwork(sc, path, tmp_path / "run", servers, tunnel=tunnel)
    network.start()
    try:
        def server(node):
            return getattr(network.net.get(node), "server", None) or "localhost"

        placed = {server(n) for n in [*network.fabric.switches, *network.fabric.hosts]}
        assert placed == set(servers.names), placed  # Mininet's placer used every server
        assert network.net.pingAll(timeout=2) == 0.0
        # a stream whose every path crosses servers when there are two (through a
        # tunnel): hosts on different servers, else hosts whose switches are not all on
        # one server; with one server, cross-pod (through a core switch)
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
        print(f"{src}@{server(src)} -> {dst}@{server(dst)} tier {tier} through "
              f"{'+'.join(sorted(on_paths))}: {bps / 1e6:.2f} of {expected / 1e6:.2f} Mbit/s")
        assert 0.85 * expected <= bps <= 1.05 * expected, (bps, expected)
    finally:
        network.stop()
    assert cleanup.find_leftovers().empty
    for name in servers.names[1:]:
        assert "nothing to clean" in _remote_leftovers(servers, name), name


def test_emulate_runs_its_workers_on_every_server_and_reads_every_servers_counters(tmp_path):
    """`testbed emulate --cluster`: each prefill/decode worker runs on its host's server
    (over SSH there), reaching the router by TCP on emulation.bind; telemetry and the
    fidelity monitor read the tc counters of every server's switches."""
    inv, tunnel, extra = _inventory(tmp_path)
    path = write_small(tmp_path, TRACE, {**extra, "schedulers": ["netkv-full"], "seeds": 1,
                                         "drain_s": 60, "workload.profile": "rag",
                                         "workload.warmup_s": 1, "workload.measure_s": 3})
    sc = load_scenario(path)
    done = subprocess.run([sys.executable, "-m", "testbed", "emulate", str(path), "--out",
                           str(tmp_path / "results"), "--quiet", "--cluster", str(inv),
                           "--tunnel", tunnel], cwd=ROOT, capture_output=True, text=True,
                          timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    assert cleanup.find_leftovers().empty
    (run,) = (tmp_path / "results").glob("*/cells/*/netkv-full/seed1")
    result = json.loads((run / "router.json").read_text())
    assert result["outcome"] == "finished" and not result["errors"], result["errors"]
    assert {r["state"] for r in result["requests"]} == {"completed"}
    assert result["wire_bytes_received"] == result["wire_bytes_expected"] > 0
    servers = servers_from_inventory(inv)
    remote = servers.names[1:]
    # another machine's workers had their clock measured (and a start on it)
    assert bool(result["clock_offsets_s"]) == bool(remote), result["clock_offsets_s"]
    print("clock offsets (s):", result["clock_offsets_s"])
    with (run / "links.csv").open() as fh:
        seen = {row["link"] for row in csv.DictReader(fh)}
    fabric = sc.fabric()
    every = {f"{n}>{link.peer_of(n)}" for n, _, link in fabric.egress_interfaces()
             if n in fabric.switches}
    assert seen == every, sorted(every - seen)  # remote switches' ports were read too
    for name in remote:
        assert "nothing to clean" in _remote_leftovers(servers, name), name
