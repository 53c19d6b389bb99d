"""The fast backlog reader on a real shaped link: two namespaces joined by a veth, HTB at
2 Mbit/s on one end, UDP pushed through it at twice its rate, then paced under it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from testbed.datapath import tc
from testbed.datapath.backlog import BacklogReader
from testbed.emulation import fidelity

RATE = 2e6
SENDER = """
import socket, sys, time
rate, seconds = float(sys.argv[1]), float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
gap, end, due = 1400 * 8 / rate, time.monotonic() + seconds, time.monotonic()
while time.monotonic() < end:
    try:
        s.sendto(bytes(1400), ("10.77.0.2", 9))
    except OSError:
        pass  # a full queue: the qdisc dropped it
    due += gap
    time.sleep(max(0.0, due - time.monotonic()))
"""


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
    return subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", SENDER,
                             str(rate), str(seconds)])


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
        assert fidelity.standing(n, busy) is not None and busy / n > 0.9
        time.sleep(1.0)  # drained: 80 packets at 2 Mbit/s take 0.45 s
        assert reader.read()[dev][0] == 0
        sender = _send(ns, 0.3 * RATE, 2.0)  # well under the rate: packets pass at once
        n, busy = _sample(reader, dev, 1.0)
        sender.wait(timeout=10)
        assert fidelity.standing(n, busy) is None and busy / n < 0.3
    finally:
        reader.close()
