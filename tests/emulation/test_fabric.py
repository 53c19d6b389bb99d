"""The emulated fat-tree end to end: reachability, tier rates, fairness, ECMP, DSCP,
congestion telemetry, failover, the oracle and Prometheus, on the system's Open vSwitch
and on the userspace datapath split over two private OVS daemons."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from scapy.all import IP, TCP, rdpcap

from testbed.topologies.replica import rto_min_ms
from testbed.workers.router.fault_state import fault_interfaces, set_links
from tests.conftest import ROOT
from tests.emulation.conftest import SLOWDOWN, running_fabric, wait_for
from tests.emulation.helpers import (
    capture_command,
    egress_bytes,
    iperf,
    jain,
    start_iperf,
    start_iperfs,
)

pytestmark = pytest.mark.root


@pytest.fixture(scope="module", params=[1, 2], ids=["system-ovs", "two-ovs-daemons"])
def fabric(request, tmp_path_factory):
    extra = {"emulation.ovs_instances": request.param}
    if request.param > 1:
        extra["emulation.datapath"] = "user"
    elif os.environ.get("NETKV_TEST_DATAPATH"):  # e.g. kernel: inside a VM whose kernel has it
        extra["emulation.datapath"] = os.environ["NETKV_TEST_DATAPATH"]
    yield from running_fabric(tmp_path_factory, extra)


def test_the_fabric_runs_on_the_datapath_it_asked_for(fabric):
    wanted = fabric.scenario.emulation.datapath
    assert fabric.datapath == wanted or (wanted == "auto" and fabric.datapath in {"kernel", "user"})
    switch = sorted(fabric.fabric.switches)[0]  # its node's shell reaches the daemon that holds it
    kind = fabric.net.get(switch).vsctl("get", "Bridge", switch, "datapath_type")
    assert ("netdev" in kind) == (fabric.datapath == "user"), kind
    if fabric.datapath == "kernel":  # the switches' ports are in the kernel module's datapath
        shown = subprocess.run(["ovs-dpctl", "show"], capture_output=True, text=True).stdout
        assert "system@ovs-system" in shown and f": {switch}-eth1" in shown, shown


def test_all_hosts_reach_each_other_across_pods(fabric):
    assert fabric.net.pingAll(timeout=1) == 0.0


@pytest.mark.parametrize("dst, tier", [("i1", 1), ("i2", 2), ("i4", 3)])
def test_tcp_reaches_90_percent_of_the_tier_bottleneck(fabric, dst, tier):
    expected = fabric.fabric.rate_bps(fabric.scenario.cluster.spec().tier_bandwidth_gbps[tier])
    assert fabric.fabric.spec.tier("i0", dst) == tier
    # HTB lets a bucket's burst through at line rate (in a software-emulated VM, 4 s let the
    # slowest tier read 118% of its rate): the first seconds are left out of the figure. What
    # TCP can reach is the best of up to three runs: on two cores another process can only
    # take rate away (CI read 85% once on a busy machine); the shaper's cap holds on each.
    omit = max(1, round(SLOWDOWN))
    runs = []
    while len(runs) < 3 and (not runs or max(runs) < 0.9 * expected):
        runs.append(iperf(fabric, "i0", dst, seconds=4 * SLOWDOWN, extra=f"-O {omit}"))
        assert runs[-1] <= 1.05 * expected, runs  # nothing leaks past the shaper
    shown = ", ".join(f"{r / 1e6:.2f}" for r in runs)
    assert max(runs) >= 0.9 * expected, f"tier {tier}: {shown} of {expected / 1e6:.2f} Mbit/s"


def test_hosts_routes_and_leaf_queues_are_as_the_scenario_says(fabric):
    emu = fabric.scenario.emulation
    routes = fabric.host("i0").cmd("ip route show")
    # the replica's floor in modelled ms (Linux's 200 unless the scenario says), in wall ms
    assert f"rto_min lock {round(emu.dilation.wall(rto_min_ms(emu)))}ms" in routes, routes
    port = next(intf for node, intf, _ in fabric.fabric.egress_interfaces()
                if node in fabric.fabric.switches)
    where = fabric.interface_netns.get(port)
    shown = subprocess.run([*(["nsenter", f"--net={where}"] if where else []),
                            "tc", "qdisc", "show", "dev", port], capture_output=True,
                           text=True, check=True).stdout
    kind, other = ("bfifo", "pfifo") if emu.queue_limit == "bytes" else ("pfifo", "bfifo")
    assert kind in shown and other not in shown, shown


@contextmanager
def link_down(fabric, a: str, b: str):
    # as a scenario's link_down fault does it: both switch ports, in their namespaces
    class Fault:
        kind, target = "link_down", f"{a}-{b}"

    ports = fault_interfaces(fabric.fabric, Fault)
    set_links(ports, up=False, netns=fabric.interface_netns)
    try:
        wait_for(lambda: f"{a}-{b}" in fabric.status()["down_links"], 10, f"{a}-{b} down")
        yield
    finally:
        set_links(ports, up=True, netns=fabric.interface_netns)
        wait_for(lambda: not fabric.status()["down_links"], 10, f"{a}-{b} back up")


def test_two_flows_on_the_oversubscribed_core_share_it_fairly(fabric):
    # one core path left; long enough that one retransmission timeout, which can leave a
    # flow silent for a second on this shallow-queued replica, does not decide the shares
    with link_down(fabric, "agg0", "core0"):
        procs = start_iperfs(fabric, [("i0", "i4", 5301), ("i1", "i5", 5302)], "-t 12 -O 1")
        rates = [json.loads(p.communicate(timeout=30)[0])["end"]["sum_received"]
                 ["bits_per_second"] for p in procs]
    core = fabric.fabric.rate_bps(25.0)
    assert jain(rates) >= 0.9, rates
    assert sum(rates) >= 0.85 * core and sum(rates) <= 1.05 * core


def test_ecmp_spreads_flows_over_both_core_paths(fabric):
    before = egress_bytes(fabric, {"core0", "core1"})
    # per-flow hashing on random source ports: 8 flows all took one path once in ~128
    # runs (CI saw it); with 16, one path gets at most one flow in ~1 in 2,000
    iperf(fabric, "i0", "i4", seconds=3, extra="-P 16")
    after = egress_bytes(fabric, {"core0", "core1"})
    per_core = {c: sum(after[i] - before[i] for i in after if i.startswith(c + "-"))
                for c in ("core0", "core1")}
    total = sum(per_core.values())
    assert total > 0 and min(per_core.values()) >= 0.1 * total, per_core


def _congestion(fabric) -> dict[str, float]:
    return fabric.oracle()["congestion"]


def test_congestion_rises_on_the_loaded_tier_but_not_for_kv(fabric):
    kv_port = fabric.scenario.emulation.kv_port
    # background (best effort) between racks of one pod: tier-2 links only
    proc = start_iperf(fabric, "i0", "i2", 5401, "-t 5 -P 2")
    time.sleep(3.0)
    busy = _congestion(fabric)
    proc.communicate(timeout=30)
    assert busy["2"] > 0.05, busy
    assert busy["3"] < 0.02, busy
    wait_for(lambda: _congestion(fabric)["2"] < 0.02, 10, "tier 2 to drain")
    # the same traffic on the KV port: marked AF41, excluded from c_tier
    proc = start_iperf(fabric, "i0", "i2", kv_port, "-t 5 -P 2")
    time.sleep(3.0)
    kv = _congestion(fabric)
    proc.communicate(timeout=30)
    assert kv["2"] < 0.02, kv
    util = fabric.oracle()  # the oracle still answers while KV flows run
    assert util["age_s"] is not None


def test_kv_packets_on_a_core_link_carry_the_kv_dscp(fabric, tmp_path):
    kv_port = fabric.scenario.emulation.kv_port
    pod1_aggs = {fabric.fabric.spec.agg(1, j) for j in range(fabric.fabric.spec.n_aggs)}
    links = [lk for lk in fabric.fabric.links if lk.b.startswith("core") and lk.a in pod1_aggs]
    intfs = [fabric.fabric.intf_name(lk.b, lk.port_b) for lk in links]
    caps = []
    for intf in intfs:
        out = tmp_path / f"{intf}.pcap"
        caps.append((out, subprocess.Popen(capture_command(fabric, intf, out),
                                           stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL)))
    time.sleep(1.0)
    try:
        iperf(fabric, "i0", "i4", seconds=2, port=kv_port, extra="-P 4")  # marked by port
        iperf(fabric, "i0", "i4", seconds=2, port=5501, extra="--tos 0x88")  # trusted
        iperf(fabric, "i0", "i4", seconds=2, port=5502, extra="--tos 0x28")  # re-marked
    finally:
        for _, proc in caps:
            proc.terminate()
            proc.wait(timeout=10)
    dscp_by_port: dict[int, set[int]] = {}
    for out, _ in caps:
        for pkt in rdpcap(str(out)):
            # data segments only: iperf3's own control connection (small JSON, never
            # TOS-marked by iperf3) shares the port
            if (IP in pkt and TCP in pkt and pkt[IP].src == "10.0.0.1"
                    and len(pkt[TCP].payload) > 1000):
                dscp_by_port.setdefault(pkt[TCP].dport, set()).add(pkt[IP].tos >> 2)
    assert dscp_by_port.get(kv_port) == {34}, dscp_by_port
    assert dscp_by_port.get(5501) == {34}, dscp_by_port
    assert dscp_by_port.get(5502) == {0}, dscp_by_port


def test_a_core_link_down_keeps_pairs_reachable_and_a_stream_completes(fabric):
    size = 3 * 2**20  # ~5 s at the 5 Mbit/s core rate
    before = egress_bytes(fabric, {"core0", "core1"})
    proc = start_iperf(fabric, "i0", "i4", 5601, f"-n {size}")
    time.sleep(1.5)
    after = egress_bytes(fabric, {"core0", "core1"})
    busy = max(("core0", "core1"), key=lambda c: sum(after[i] - before[i] for i in after
                                                     if i.startswith(c + "-")))
    agg = "agg0" if busy == "core0" else "agg1"  # pod 0's aggregation switch on that path
    other = "core1" if busy == "core0" else "core0"
    with link_down(fabric, agg, busy):
        out, _ = proc.communicate(timeout=60)
        moved = egress_bytes(fabric, {other})
        # a clean exit means TCP delivered every byte it sent (iperf3's receiver count
        # is taken before the last in-flight bytes land, so it is not the check)
        assert proc.returncode == 0, out[-500:]
        result = json.loads(out)
        assert "error" not in result
        assert result["end"]["sum_sent"]["bytes"] >= size
        # the stream really moved: the surviving core carried a good part of it
        carried = sum(moved[i] - after[i] for i in moved if i in after)
        assert carried >= 0.2 * size, carried
        assert fabric.net.pingAll(timeout=1) == 0.0


def test_oracle_serves_the_four_maps_and_takes_intents(fabric):
    doc = fabric.oracle()
    for key in ("tier_map", "tier_bandwidth", "tier_latency", "congestion", "age_s"):
        assert key in doc
    assert doc["tier_bandwidth"] == {"0": 3600.0, "1": 100.0, "2": 50.0, "3": 25.0}
    assert doc["age_s"] < 5
    url = f"{fabric.base_url}/intent"
    body = json.dumps({"request_id": "r1", "src": "i0", "dst": "i4", "size_bytes": 10**9})
    req = urllib.request.Request(url, body.encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 202
    bad = urllib.request.Request(url, b'{"src": "i0"}', {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(bad, timeout=5)
    assert err.value.code == 400 and "request_id" in err.value.read().decode()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CONSOLES = ROOT / "playbooks" / "roles" / "prometheus" / "files" / "consoles"


@contextmanager
def prometheus(fabric, tmp_path):
    """A Prometheus of our own scraping the controller every second, serving the
    playbook's console templates: yields its base URL."""
    binary = shutil.which("prometheus")
    assert binary, "Debian's prometheus package is part of the setup"
    emu = fabric.scenario.emulation
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: netkv\n    static_configs: [{{targets: ['{emu.bind}:{emu.metrics_port}']}}]\n")
    (tmp_path / "libraries").mkdir()
    port = _free_port()
    proc = subprocess.Popen([binary, f"--config.file={config}",
                             f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}",
                             f"--web.console.templates={CONSOLES}",
                             f"--web.console.libraries={tmp_path / 'libraries'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def promql(base: str, query: str):
    """The result vector of an instant query, or None while Prometheus is not ready."""
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return json.loads(resp.read())["data"]["result"] or None
    except (OSError, ValueError, KeyError):
        return None


def test_prometheus_scrapes_the_congestion_metric(fabric, tmp_path):
    with prometheus(fabric, tmp_path) as base:
        result = wait_for(lambda: promql(base, "netkv_tier_congestion"), 40,
                          "Prometheus to scrape netkv_tier_congestion", 0.5)
        tiers = {r["metric"]["tier"] for r in result}
        assert {"1", "2", "3"} <= tiers
        assert all(0.0 <= float(r["value"][1]) < 1.0 for r in result)


def test_the_console_renders_the_live_fabric_in_chromium(fabric, tmp_path, record_property):
    """The playbook's console template, served by Prometheus with this fabric's metrics
    while a transfer loads a cross-pod path, rendered by headless Chromium."""
    chromium = shutil.which("chromium")
    assert chromium, "Chromium (the devtools role) renders the console"
    assert (Path("/etc/prometheus/consoles/netkv.html").read_text() ==
            (CONSOLES / "netkv.html").read_text()), "the playbook installs this console"
    intent = json.dumps({"request_id": "console", "src": "i0", "dst": "i4",
                         "size_bytes": 10**9}).encode()
    with prometheus(fabric, tmp_path) as base:
        urllib.request.urlopen(urllib.request.Request(
            f"{fabric.base_url}/intent", intent, {"Content-Type": "application/json"}),
            timeout=5).close()
        proc = start_iperf(fabric, "i0", "i4", 5701, "-t 12")
        try:
            wait_for(lambda: promql(base, "max(netkv_link_utilisation) > 0.3"), 40,
                     "Prometheus to see the loaded path", 0.5)
            wait_for(lambda: promql(base, "netkv_transfer_intents_total > 0"), 20,
                     "Prometheus to see the intent", 0.5)
            # the drops and bytes tables are rates: they need two scrapes of each counter
            for counter in ("netkv_class_drops_total", "netkv_class_bytes_total"):
                query = f"sum by (class) (rate({counter}[30s]))"
                wait_for(lambda q=query: promql(base, q), 20,
                         f"Prometheus to have a rate of {counter}", 0.5)
            page = f"{base}/consoles/netkv.html"
            flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
            dom = subprocess.run([chromium, *flags, "--dump-dom", page], capture_output=True,
                                 text=True, timeout=120, check=True).stdout
            shot = tmp_path / "console.png"
            subprocess.run([chromium, *flags, "--window-size=1100,1300",
                            f"--screenshot={shot}", page], capture_output=True, timeout=120,
                           check=True)
        finally:
            proc.wait(timeout=30)
    record_property("screenshot", str(shot))
    print(f"console screenshot: {shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    tables = {m.group(1): m.group(2) for m in
              re.finditer(r'<table[^>]*id="([a-z-]+)"[^>]*>(.*?)</table>', dom, re.S)}
    congestion = dict(re.findall(r'<td>T(\d)</td><td class="num">([0-9.]+)</td>',
                                 tables["congestion"]))
    assert set(congestion) >= {"1", "2", "3"}, tables["congestion"]
    assert all(0.0 <= float(v) < 1.0 for v in congestion.values())
    busiest = re.findall(r'<td>T(\d)</td>\s*<td>([a-z_]+)</td><td class="num">([0-9.]+)</td>',
                         tables["links"])
    assert busiest and float(busiest[0][2]) > 0.3, tables["links"]
    # iperf3 sends unmarked: the busiest row is the background class on a cross-pod path
    assert busiest[0][1] == "background" and busiest[0][0] in {"1", "2", "3"}
    assert re.search(r'id="intents">[1-9]\d*<', dom), "the transfer intent is counted"
    assert re.search(r'id="oracle-age">[0-9.]+ s<', dom), "the oracle's age is shown"
    assert re.search(r'<td>T\d</td><td>[a-z_]+</td><td class="num">0\.[0-9]{3}</td>',
                     tables["utilisation"])
    assert "no data" not in dom
