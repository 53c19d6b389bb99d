"""The fast backlog reader and the per-packet departure trace on a real shaped link: two
namespaces joined by a veth, HTB at 2 Mbit/s on one end, UDP pushed through it at twice
its rate, then paced under it; and the classes a KV connection's packets take there."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.datapath import departures, tc
from testbed.datapath.backlog import BacklogReader
from testbed.emulation import cleanup, judge

RATE = 2e6
# the paced sender the shaped-link benchmark uses too
PACED_UDP = Path(__file__).parents[2] / "benchmarks" / "paced_udp.py"


@pytest.fixture
def shaped_link():
    tag = f"nkbl{os.getpid() % 10000}"
    a, b = f"{tag}a", f"{tag}b"
    run = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True)  # noqa: E731
    try:
        run("ip", "netns", "add", a)
        run("ip", "netns", "add", b)
        run("ip", "link", "add", f"{tag}x", "netns", a, "type", "veth", "peer", "name",
            f"{tag}y", "netns", b)
        for ns, dev, ip in ((a, f"{tag}x", "10.77.0.1/24"), (b, f"{tag}y", "10.77.0.2/24")):
            run("ip", "-n", ns, "addr", "add", ip, "dev", dev)
            run("ip", "-n", ns, "link", "set", dev, "up")
        tc.install_htb(f"{tag}x", RATE, netns=f"/run/netns/{a}")
        yield a, f"{tag}x"
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        assert not any(n in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                           text=True).stdout for n in (a, b))


def _sample(reader: BacklogReader, dev: str, seconds: float, hz: float = 100.0):
    n = busy = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        backlog, _ = reader.read()[dev]
        n, busy = n + 1, busy + (backlog > 0)
        time.sleep(1 / hz)
    return n, busy


def _send(ns: str, rate: float, seconds: float) -> subprocess.Popen:
    return subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, str(PACED_UDP),
                             str(rate), str(seconds), "10.77.0.2"])


def test_a_link_pushed_past_its_rate_holds_a_backlog_and_a_paced_one_does_not(shaped_link):
    ns, dev = shaped_link
    reader = BacklogReader([dev, "no-such-port"], {dev: f"/run/netns/{ns}"})
    try:
        assert reader.read() == {dev: (0, 0)}  # idle, and a missing port is left out
        sender = _send(ns, 2 * RATE, 2.5)
        time.sleep(0.5)  # the queue fills within a few packet times
        n, busy = _sample(reader, dev, 1.0)
        sender.wait(timeout=10)
        assert n >= 50  # 100 Hz asked; a loaded machine keeps at least half
        assert judge.standing(n, busy) is not None and busy / n > 0.9
        time.sleep(1.0)  # drained: 80 packets at 2 Mbit/s take 0.45 s
        assert reader.read()[dev][0] == 0
        sender = _send(ns, 0.3 * RATE, 2.0)  # well under the rate: packets pass at once
        n, busy = _sample(reader, dev, 1.0)
        sender.wait(timeout=10)
        assert judge.standing(n, busy) is None and busy / n < 0.3
    finally:
        reader.close()


def test_departures_of_a_queued_link_are_on_time_and_a_link_slower_than_claimed_is_late(
        shaped_link, tmp_path):
    ns, dev = shaped_link
    netns = {dev: f"/run/netns/{ns}"}
    tracer = departures.DepartureTracer({dev: RATE}, tmp_path / "t.trace", netns).start()
    try:
        _send(ns, 2 * RATE, 2.0).wait(timeout=10)
    finally:
        got, lost = tracer.stop()
    assert not tracer.instance.exists()  # the kernel's instance went with the trace
    on_time = got[dev]
    assert lost == 0 and on_time.judged >= 200  # ~170 frames/s queued for 2 s
    assert on_time.late_share <= judge.MAX_LATE_SHARE
    # the same departures against a rate 3x the real one: each 2 frame times late, but
    # for pairs HTB sends back to back after its timer fired late (30% under load)
    links = {dev: (departures._ifindexes([dev], netns)[dev], 3 * RATE)}
    with (tmp_path / "t.trace").open() as f:
        slow = departures.spacing(f, links)[dev]
    assert slow.judged == on_time.judged and slow.late_share > 0.5


KILLED = """
import os, signal, sys, time
from pathlib import Path
from testbed.datapath.departures import DepartureTracer
t = DepartureTracer({sys.argv[1]: 2e6}, Path(sys.argv[2]), {sys.argv[1]: sys.argv[3]}).start()
print(t.instance, t._cat.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_trace_left_by_a_killed_run_dies_with_it_and_clean_removes_its_instance(
        shaped_link, tmp_path):
    ns, dev = shaped_link
    proc = subprocess.run([sys.executable, "-c", KILLED, dev, str(tmp_path / "t.trace"),
                           f"/run/netns/{ns}"], capture_output=True, text=True, timeout=30)
    instance, cat = proc.stdout.split()
    assert proc.returncode == -9 and os.path.isdir(instance)
    deadline = time.monotonic() + 5  # the kernel signals the reader as its parent dies
    while os.path.exists(f"/proc/{cat}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{cat}")
    left = [p for p in cleanup.find_leftovers().traces if str(p) == instance]
    assert left  # found by name, its process gone
    cleanup.remove(cleanup.Leftovers(traces=left))
    assert not os.path.exists(instance)
    assert instance not in map(str, cleanup.find_leftovers().traces)


def test_class_counters_read_over_raw_netlink_are_pyroute2s(shaped_link):
    # the raw class dump the poller and the monitor use, against pyroute2 decoding the
    # same classes, once the link is quiet (every counter still)
    ns, dev = shaped_link
    _send(ns, 2 * RATE, 1.0).wait(timeout=10)
    time.sleep(1.0)  # drained: at most a 16-packet queue at 2 Mbit/s

    def pyroute2_view(ipr):
        index = ipr.link_lookup(ifname=dev)[0]
        out = {}
        for cls in ipr.get_classes(index=index):
            stats = cls.get_attr("TCA_STATS2")
            basic = stats.get_attr("TCA_STATS_BASIC")
            queue = stats.get_attr("TCA_STATS_QUEUE")
            out[cls["handle"]] = (basic["bytes"], basic["packets"], queue["drops"],
                                  queue["overlimits"], queue["backlog"])
        return out

    netns = {dev: f"/run/netns/{ns}"}
    want = tc.in_namespace(netns[dev], pyroute2_view)
    got = tc.all_counters([dev, "no-such-port"], include_link=True, netns=netns)
    assert set(got) == {dev}  # a missing port is left out
    names = {0x10001: "link", 0x10010: "control", 0x10020: "kv", 0x10030: "background"}
    assert {names[h]: v for h, v in want.items() if h in names} == {
        name: tuple(c.values()) for name, c in got[dev].items()}
    # the paced UDP is best effort: twice the rate for a second through the background
    # class, so its queue overflowed
    assert got[dev]["background"]["bytes"] > 0.8 * RATE / 8
    assert got[dev]["background"]["drops"] > 0 and got[dev]["link"]["bytes"] > 0


_TCP_EXCHANGE = """
import socket, sys
from testbed.topologies.traffic_classes import KV
if sys.argv[1] == "serve":
    server = socket.create_server(("10.77.0.2", 7000))
    print("ready", flush=True)
    conn, _ = server.accept()
    while conn.recv(65536):
        pass
    sys.exit(0)
sock = socket.socket()
sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, KV.tos)
sock.connect(("10.77.0.2", 7000))
sock.sendall(bytes(30000))
sock.close()
"""


def _exchange(shaped_link, script: str) -> dict[str, dict[str, int]]:
    """`script serve` in the link's far namespace (it prints "ready" once listening, and
    exits 0 once all it expects has landed), then `script send` in the near one; what
    that moved through each class of the shaped egress."""
    ns, dev = shaped_link
    netns = {dev: f"/run/netns/{ns}"}
    before = tc.all_counters([dev], netns=netns)[dev]
    here = Path(__file__).parents[2]
    server = subprocess.Popen(["ip", "netns", "exec", ns[:-1] + "b", sys.executable, "-c",
                               script, "serve"], cwd=here, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        done = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", script,
                               "send"], cwd=here, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert server.wait(timeout=60) == 0
    finally:
        server.kill()
    after = tc.all_counters([dev], netns=netns)[dev]
    return {name: {k: after[name][k] - before[name][k] for k in after[name]}
            for name in after}


def test_a_kv_connections_syn_rides_the_control_class_and_its_data_the_kv_class(shaped_link):
    # a SYN marked as KV must not take (or be dropped for want of) a KV data slot
    moved = _exchange(shaped_link, _TCP_EXCHANGE)
    assert moved["control"]["packets"] == 1  # the SYN, nothing else
    assert moved["kv"]["bytes"] > 30000  # the data, by its TOS


_KEPT_TRANSFERS = """
import sys, threading
from testbed.workers import kvstream
if sys.argv[1] == "serve":
    landed, all_in = [], threading.Event()
    def on_shard(r):
        landed.append(r)
        if len(landed) == 12:
            all_in.set()
    kvstream.KVReceiver("10.77.0.2", 7000, on_shard).start()
    print("ready", flush=True)
    sys.exit(0 if all_in.wait(60) else 1)
pool = kvstream.ConnectionPool()
for k in range(3):
    kvstream.send_transfer("10.77.0.2", 7000, f"r{k}", [20000] * 4, pool=pool)
pool.close()
"""


def test_kept_kv_connections_open_once_per_shard_not_once_per_transfer(shaped_link):
    # emulation.kv_connections: persistent: three transfers of four shards, four SYNs
    moved = _exchange(shaped_link, _KEPT_TRANSFERS)
    assert moved["control"]["packets"] == 4
    assert moved["kv"]["bytes"] > 3 * 4 * 20000
