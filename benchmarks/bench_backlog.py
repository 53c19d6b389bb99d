"""The fidelity monitor's backlog read (root): CPU per read of every port's root qdisc,
the raw netlink reader (testbed/datapath/backlog.py) vs pyroute2's dump, side by side in
one run, and what sampling at 100 Hz costs. Figures, never assertions.

It makes N veth pairs with the fabric's HTB tree inside a network namespace of its own
and removes the namespace at the end (also on Ctrl-C).

Run: sudo .venv/bin/python benchmarks/bench_backlog.py [--ports 80] [--reads 200]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time

from pyroute2 import IPRoute

from testbed.datapath import tc
from testbed.datapath.backlog import BacklogReader


def cpu_per_call(fn, reads: int) -> float:
    start = time.process_time()
    for _ in range(reads):
        fn()
    return (time.process_time() - start) / reads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ports", type=int, default=80, help="switch egress ports (default 80: "
                    "the paper's fat-tree)")
    ap.add_argument("--reads", type=int, default=200)
    args = ap.parse_args()
    ns = f"nkbench{os.getpid() % 10000}"
    path = f"/run/netns/{ns}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        names = []
        for i in range(args.ports):
            name = f"bb{i}"
            subprocess.run(["ip", "-n", ns, "link", "add", name, "type", "veth", "peer", "name",
                            f"{name}p"], check=True)
            subprocess.run(["ip", "-n", ns, "link", "set", name, "up"], check=True)
            tc.install_htb(name, 10e6, netns=path)
            names.append(name)
        reader = BacklogReader(names, {n: path for n in names})
        raw = cpu_per_call(reader.read, args.reads)
        reader.close()

        def dump(ipr: IPRoute) -> float:
            return cpu_per_call(ipr.get_qdiscs, max(5, args.reads // 20))

        slow = tc.in_namespace(path, dump)
        print(f"{args.ports} ports, CPU per read of every port's backlog:")
        print(f"  raw netlink (backlog.py): {raw * 1e3:.3f} ms "
              f"({raw / args.ports * 1e6:.1f} us per port); at 100 Hz {100 * raw:.1%} of a core")
        print(f"  pyroute2 get_qdiscs dump: {slow * 1e3:.3f} ms; at 100 Hz "
              f"{100 * slow:.0%} of a core; ratio {slow / raw:.0f}x")
        # the class counters the controller's poller and the monitor read every interval
        netns = {n: path for n in names}
        few = max(5, args.reads // 20)
        classes = cpu_per_call(lambda: tc.all_counters(names, include_link=True, netns=netns),
                               few)

        def by_pyroute2(ipr: IPRoute) -> float:
            def once() -> None:
                index = {lk.get_attr("IFLA_IFNAME"): lk["index"] for lk in ipr.get_links()}
                for name in names:
                    ipr.get_classes(index=index[name])
            return cpu_per_call(once, few)

        old = tc.in_namespace(path, by_pyroute2)
        print("CPU per read of every port's class counters (bytes, packets, drops, ...):")
        print(f"  raw netlink (classes.py): {classes * 1e3:.2f} ms; pyroute2 get_links + "
              f"get_classes: {old * 1e3:.1f} ms; ratio {old / classes:.0f}x")
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


if __name__ == "__main__":
    main()
