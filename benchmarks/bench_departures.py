"""The per-packet departure test (root): on one HTB-shaped veth pushed past its rate, the
share of departures made while queued that left more than a frame time late, with the
machine idle and with busy loops at nice -5 on every core, side by side in one run; and
what the trace costs (events, bytes, parse time). Figures, never assertions.

The link lives between two network namespaces of its own, removed at the end (also on
Ctrl-C); the busy loops are killed with it.

Run: sudo .venv/bin/python benchmarks/bench_departures.py [--rates 10,40] [--seconds 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed.datapath import tc
from testbed.datapath.departures import DepartureTracer

PACED_UDP = Path(__file__).with_name("paced_udp.py")


def link(tag: str) -> tuple[str, str]:
    a, b = f"{tag}a", f"{tag}b"
    run = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True)  # noqa: E731
    run("ip", "netns", "add", a)
    run("ip", "netns", "add", b)
    run("ip", "link", "add", f"{tag}x", "netns", a, "type", "veth", "peer", "name", f"{tag}y",
        "netns", b)
    for ns, dev, ip in ((a, f"{tag}x", "10.78.0.1/24"), (b, f"{tag}y", "10.78.0.2/24")):
        run("ip", "-n", ns, "addr", "add", ip, "dev", dev)
        run("ip", "-n", ns, "link", "set", dev, "up")
    return a, f"{tag}x"


def measure(ns: str, dev: str, rate: float, seconds: float, hogs: int, trace: Path) -> str:
    busy = [subprocess.Popen(["nice", "-n", "-5", sys.executable, "-c", "while True: pass"])
            for _ in range(hogs)]
    try:
        tracer = DepartureTracer({dev: rate}, trace, {dev: f"/run/netns/{ns}"}).start()
        subprocess.run(["ip", "netns", "exec", ns, sys.executable, str(PACED_UDP),
                        str(2 * rate), str(seconds), "10.78.0.2"], check=True)
        size = trace.stat().st_size
        start = time.process_time()
        got, lost = tracer.stop()
        parse = time.process_time() - start
    finally:
        for p in busy:
            p.kill()
    sp = got.get(dev)
    if sp is None:
        return "no departure made with a queue"
    return (f"{sp.judged:6d} judged, {sp.late:4d} late ({sp.late_share:.2%}), p99 lateness "
            f"{sp.p99_late_frames:+.3f} frame; {lost} lost; trace {size / sp.judged:.0f} B "
            f"and {parse / sp.judged * 1e6:.1f} us parse per judged departure")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="10,40", help="link rates in Mbit/s (default 10,40: "
                    "the demo's links at scale 2e-4, dilation 2, and 4x that)")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--hogs", type=int, default=os.cpu_count() * 2,
                    help="busy loops at nice -5 in the loaded case (default 2 per core)")
    args = ap.parse_args()
    tags = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for k, mbit in enumerate(float(r) for r in args.rates.split(",")):
                tags.append(f"nkdb{os.getpid() % 1000}{k}")
                ns, dev = link(tags[-1])
                tc.install_htb(dev, mbit * 1e6, netns=f"/run/netns/{ns}")
                for hogs in (0, args.hogs):
                    label = "idle" if not hogs else f"{hogs} busy loops"
                    print(f"{mbit:g} Mbit/s, {label:>13}: "
                          f"{measure(ns, dev, mbit * 1e6, args.seconds, hogs, Path(tmp) / 't')}")
    finally:
        for tag in tags:
            for side in ("a", "b"):
                subprocess.run(["ip", "netns", "del", f"{tag}{side}"], capture_output=True)


if __name__ == "__main__":
    main()
