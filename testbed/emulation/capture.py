"""Packet captures of chosen links during a run, for the user to open in Wireshark.

One tcpdump per captured direction, on the sending switch's port, outgoing packets only
(`-Q out`: the tap sits after the port's qdisc, so the timestamps are departures from
the shaped queue, the instants Mininet-HiFi's fidelity test reads). Headers only by
default (emulation.capture_snaplen). After the run the pcaps are summarised per flow
(scapy) into flows.csv: packets, bytes, first and last departure, DSCP, traffic class,
and data segments sent again on this link (a retransmission seen on the wire).
"""

from __future__ import annotations

import csv
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from testbed.emulation import child
from testbed.emulation.child import die_with_parent
from testbed.emulation.net import EmulationError
from testbed.topologies.captured import directions

FLOW_FIELDS = ("link", "proto", "src", "sport", "dst", "dport", "class", "dscp", "packets",
               "bytes", "first", "last", "retransmits")


class Capture:
    """tcpdump on each captured direction while a run goes on (a context manager)."""

    def __init__(self, fabric, links: list[str], folder: Path, netns: dict[str, str],
                 snaplen: int = 128):
        egress = {(node, link.peer_of(node)): intf
                  for node, intf, link in fabric.egress_interfaces()}
        self.folder = folder
        self.snaplen = snaplen
        self.netns = netns
        # where a switch sends: a host's own port lives in its Mininet namespace
        self.ports = {(a, b): egress[(a, b)] for a, b in directions(links)
                      if a in fabric.switches}
        self.procs: list[subprocess.Popen] = []

    def pcap(self, a: str, b: str) -> Path:
        return self.folder / f"{a}_{b}.pcap"

    def __enter__(self) -> Capture:
        if not self.ports:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            for (a, b), intf in self.ports.items():
                cmd = ["tcpdump", "-i", intf, "-Q", "out", "-n", "-U", "-s", str(self.snaplen),
                       "-w", str(self.pcap(a, b))]
                if intf in self.netns:  # a private daemon's namespace (its /run/netns path)
                    cmd = ["nsenter", f"--net={self.netns[intf]}", "--", *cmd]
                with (self.folder / "tcpdump.log").open("a") as log:
                    self.procs.append(subprocess.Popen(
                        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        preexec_fn=die_with_parent))
            self._wait_listening()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_listening(self, timeout_s: float = 10.0) -> None:
        """tcpdump says "listening on" once its socket is open; a run must not start
        before (its first packets would be missed)."""
        import time

        deadline = time.monotonic() + timeout_s
        log = self.folder / "tcpdump.log"
        while time.monotonic() < deadline:
            if log.read_text().count("listening on") >= len(self.procs):
                return
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                raise EmulationError(f"capture: tcpdump ended at start: {log.read_text()[-500:]}")
            time.sleep(0.05)
        raise EmulationError(f"capture: tcpdump did not start within {timeout_s:.0f} s: {log}")

    def __exit__(self, *_exc) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGTERM: tcpdump writes what it buffered and closes the file."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.stop(proc)
        self.procs.clear()

    def summarise(self, to_modelled: Callable[[float], float], kv_ports: tuple[int, ...],
                  bg_port: int) -> list[dict]:
        """flows.csv rows of every captured direction; written beside the pcaps."""
        rows = []
        for (a, b) in self.ports:
            path = self.pcap(a, b)
            if path.exists():
                rows += flow_rows(path, f"{a}>{b}", to_modelled, kv_ports, bg_port)
        if self.ports:
            with (self.folder / "flows.csv").open("w", newline="") as fh:
                writer = csv.DictWriter(fh, FLOW_FIELDS)
                writer.writeheader()
                writer.writerows(rows)
        return rows


def flow_rows(pcap: Path, link: str, to_modelled: Callable[[float], float],
              kv_ports: tuple[int, ...], bg_port: int) -> list[dict]:
    """Per 5-tuple: what left on this link. Times in modelled seconds of the run."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.utils import PcapReader

    flows: dict[tuple, dict] = {}
    with PcapReader(str(pcap)) as packets:
        for pkt in packets:
            if IP not in pkt:
                continue
            ip = pkt[IP]
            l4 = ip.getlayer(TCP)
            if l4 is None:
                l4 = ip.getlayer(UDP)
            sport, dport = (l4.sport, l4.dport) if l4 is not None else (0, 0)
            key = (ip.proto, ip.src, sport, ip.dst, dport)
            t = float(pkt.time)
            flow = flows.get(key)
            if flow is None:
                ports = {sport, dport}
                flow = flows[key] = {
                    "link": link, "proto": {6: "tcp", 17: "udp"}.get(ip.proto, str(ip.proto)),
                    "src": ip.src, "sport": sport, "dst": ip.dst, "dport": dport,
                    "class": "kv" if ports & set(kv_ports) else "bg" if bg_port in ports else "other",
                    "dscp": ip.tos >> 2, "packets": 0, "bytes": 0, "first": t, "last": t,
                    "retransmits": 0, "_sent": None}
            flow["packets"] += 1
            flow["bytes"] += ip.len
            flow["last"] = t
            if isinstance(l4, TCP):
                payload = ip.len - 4 * ip.ihl - 4 * l4.dataofs
                if payload > 0:
                    end = l4.seq + payload
                    if flow["_sent"] is not None and end <= flow["_sent"]:
                        flow["retransmits"] += 1
                    flow["_sent"] = end if flow["_sent"] is None else max(flow["_sent"], end)
    out = []
    for flow in flows.values():
        flow.pop("_sent")
        flow["first"] = round(to_modelled(flow["first"]), 6)
        flow["last"] = round(to_modelled(flow["last"]), 6)
        out.append(flow)
    return sorted(out, key=lambda f: (f["first"], f["src"], f["sport"]))
