"""The one owner of tc: an HTB tree per sending interface, configured with pyroute2.

Tree on every egress (switch ports, and host NICs inside their namespaces):
  1:   htb, default -> background
  1:1  rate = ceil = link rate
  1:10 control, 1:20 kv, 1:30 background: rate = share x link, ceil = link, prio
  each class ends in a fifo 50 ms deep at the replica's rate in modelled time, at least 16
  packets (topologies/replica.py; the kernel default, 1000 packets, is seconds of queue at
  emulated rates): a pfifo, or with
  byte_limit a bfifo of as many full frames, as a switch's buffer is, where SYNs and ACKs
  do not take a data packet's slot (a dropped SYN costs a 1 s initial RTO)
  u32 filters on the IPv4 TOS byte (DSCP bits, mask 0xfc) steer control and kv; before
  them, TCP segments with SYN set (SYN, SYN-ACK) go to control (see SYN_KEYS).
With K priority levels (kv_levels > 0) 1:20 is an inner class over leaves 1:21.. (one
per level plus a scavenger, traffic_classes.py): each guaranteed LEVEL_SHARE of the kv
rate, ceil = link, prio = level, so spare rate goes to the highest level first.
Mininet's TCLink is not used for shaping (it would fight this tree: mininet #243, #632).
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import sys
import threading
from contextlib import contextmanager, suppress

from pyroute2 import IPRoute, NetlinkError
from pyroute2.netlink.rtnl.tcmsg import plugins as _tc_plugins
from pyroute2.netlink.rtnl.tcmsg import sched_pfifo

from testbed.datapath.classes import COUNTERS, Counters, read_classes
from testbed.model.tcp import MIN_FRAME, WIRE_FRAME
from testbed.topologies.replica import MIN_QUEUE_PACKETS, queue_packets
from testbed.topologies.traffic_classes import (
    CLASSES,
    CONTROL,
    DEFAULT_CLASS,
    KV,
    LEVEL_SHARE,
    MAX_LEVELS,
    level_dscp,
    level_minor,
)

ROOT = 0x10000
PARENT = 0x10001
HTB_PRIOS = 8  # HTB has prios 0..7: with 8 levels the scavenger shares prio 7 with level 7


def _bits(rate_bps: float) -> str:
    return f"{max(int(rate_bps), 8000)}bit"


CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL("libc.so.6", use_errno=True)


@contextmanager
def netlink():
    """IPRoute in this (root) namespace."""
    handle = IPRoute()
    try:
        yield handle
    finally:
        handle.close()


def enter_namespace(netns: str) -> None:
    """Move the calling thread into the network namespace at path `netns` (setns(2);
    os.setns needs Python 3.12, Debian 12 has 3.11)."""
    fd = os.open(netns, os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({netns}): {os.strerror(err)}")
    finally:
        os.close(fd)


def in_namespace(netns: str | None, fn, rtnl: bool = True):
    """Run fn(ipr) with a netlink socket in the namespace at path `netns` (or here);
    `rtnl=False`: fn(None), for a caller that opens its own sockets there.

    Not pyroute2's NetNS: it forks a helper, and a forked copy of the orchestrator that
    gets a signal runs the orchestrator's teardown. Instead a short-lived thread enters
    the namespace with setns(2), which moves only that thread, and opens the socket there.
    """
    def call():
        if not rtnl:
            return fn(None)
        with netlink() as ipr:
            return fn(ipr)

    if netns is None:
        return call()
    box: dict = {}

    def target() -> None:
        try:
            enter_namespace(netns)
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name="netns-tc")
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _index(ipr, ifname: str) -> int:
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise RuntimeError(f"interface {ifname} not found")
    return found[0]


def install_htb(ifname: str, rate_bps: float, netns: str | None = None, kv_levels: int = 0,
                packets: int | None = None, byte_limit: bool = False,
                frame_bytes: int = WIRE_FRAME, kv_ports: tuple[int, ...] = ()) -> None:
    """Replace whatever root qdisc the interface has with the project's HTB tree: each
    leaf `packets` deep (the fabric's: replica.leaf_packets; None: QUEUE_S at `rate_bps`,
    at least MIN_QUEUE_PACKETS, for a link outside the replica). `kv_ports`: TCP ports
    whose segments (either direction) are KV whatever their DSCP: a host NIC carrying a
    transfer library's unmarked sockets (traffic_classes.engine_ports)."""
    if packets is None:
        packets = queue_packets(rate_bps, MIN_QUEUE_PACKETS, frame_bytes)
    in_namespace(netns, lambda ipr: _install_htb(ipr, ifname, rate_bps, packets, byte_limit,
                                                 kv_levels, frame_bytes, kv_ports))


# the kernel's bfifo takes pfifo's options (struct tc_fifo_qopt: a limit, here in bytes);
# pyroute2 0.9 registers only the packet-limited kind
_tc_plugins.setdefault("bfifo", sched_pfifo)


def _install_htb(ipr, ifname: str, rate_bps: float, packets: int, byte_limit: bool,
                 kv_levels: int = 0, frame_bytes: int = WIRE_FRAME,
                 kv_ports: tuple[int, ...] = ()) -> None:
    idx = _index(ipr, ifname)
    with suppress(NetlinkError):  # no root qdisc yet
        ipr.tc("del", index=idx)
    ipr.tc("add", "htb", idx, ROOT, default=DEFAULT_CLASS.classid_minor)
    ipr.tc("add-class", "htb", idx, PARENT, parent=ROOT, rate=_bits(rate_bps),
           ceil=_bits(rate_bps))
    fifo, limit = ("bfifo", packets * frame_bytes) if byte_limit else ("pfifo", packets)
    for c in CLASSES:
        ipr.tc("add-class", "htb", idx, ROOT | c.classid_minor, parent=PARENT,
               rate=_bits(rate_bps * c.share), ceil=_bits(rate_bps), prio=c.prio)
        if c is KV and kv_levels:
            continue  # an inner class: its levels hold the queues
        ipr.tc("add", fifo, idx, c.classid_minor << 16, parent=ROOT | c.classid_minor,
               limit=limit)
    targets = {c.dscp: ROOT | c.classid_minor for c in CLASSES if c is not DEFAULT_CLASS}
    for k in range(kv_levels + 1 if kv_levels else 0):  # K levels and the scavenger
        minor = level_minor(k)
        ipr.tc("add-class", "htb", idx, ROOT | minor, parent=ROOT | KV.classid_minor,
               rate=_bits(rate_bps * KV.share * LEVEL_SHARE), ceil=_bits(rate_bps),
               prio=min(k, HTB_PRIOS - 1))
        ipr.tc("add", fifo, idx, minor << 16, parent=ROOT | minor, limit=limit)
        targets[level_dscp(k, kv_levels)] = ROOT | minor
        if k == 0:
            targets[KV.dscp] = ROOT | minor  # unlevelled KV (ACKs) rides the top level
    ipr.tc("add-filter", "u32", idx, parent=ROOT, prio=1, protocol=0x0800,
           target=ROOT | CONTROL.classid_minor, keys=list(SYN_KEYS))
    for pref, (dscp, target) in enumerate(targets.items(), start=2):
        ipr.tc("add-filter", "u32", idx, parent=ROOT, prio=pref, protocol=0x0800,
               target=target, keys=[_tos_key(dscp)])
    pref = len(targets) + 2
    for port in kv_ports:  # after the DSCP filters: a marked level keeps its level
        for key in _port_keys(port):
            ipr.tc("add-filter", "u32", idx, parent=ROOT, prio=pref, protocol=0x0800,
                   target=targets[KV.dscp], keys=[*TCP_KEYS, key])
            pref += 1


# Connection set-up rides the control class: in a packet-limited 16-slot queue a SYN
# behind data takes a data packet's slot and is dropped where a switch's byte-counted
# buffer has room for 64 bytes, and each drop costs the kernel's 1 s initial RTO (0.5-3.5
# modelled s at dilation 2): an artifact of the replica, and one that a serving system on
# persistent connections (NCCL, Mooncake's transfer engine) never sees. Measured on the
# chatbot validation row: 23% of transfers had a shard connect >= 0.3 modelled s late.
# u32 keys (value/mask+offset from the IPv4 header): IHL 5, not a later fragment, TCP,
# and the SYN flag in the TCP header's byte 13 (IPv4 byte 33).
SYN_KEYS = ("0x05000000/0x0f000000+0", "0x00000000/0x00001fff+4",
            "0x00060000/0x00ff0000+8", "0x00020000/0x00020000+32")


# IHL 5, not a later fragment, TCP: then the ports are the 32-bit word at offset 20
TCP_KEYS = SYN_KEYS[:3]


def _port_keys(port: int) -> tuple[str, str]:
    """u32 keys on a TCP segment's source port, and on its destination port."""
    return f"0x{port << 16:08x}/0xffff0000+20", f"0x{port:08x}/0x0000ffff+20"


def _tos_key(dscp: int) -> str:
    """u32 key on the TOS byte: 32-bit word at offset 0, byte 1, DSCP bits only."""
    return f"0x{(dscp << 2) << 16:08x}/0x00fc0000+0"


LINK = "link"  # the root class 1:1: the whole link, for saturation checks


def _by_name(raw: dict[int, Counters], include_link: bool = False, levels: bool = False
             ) -> dict[str, dict[str, int]]:
    """Counters per class name; with priority levels, "kv" is the sum of its level leaves
    (the inner class keeps no queue of its own) and, if asked, each leaf as "kv.<k>"."""
    by_minor = {c.classid_minor: c.name for c in CLASSES}
    by_minor.update({level_minor(k): f"{KV.name}.{k}" for k in range(MAX_LEVELS + 1)})
    if include_link:
        by_minor[PARENT & 0xFFFF] = LINK
    out: dict[str, dict[str, int]] = {}
    for handle, values in raw.items():
        name = by_minor.get(handle & 0xFFFF)
        if name is not None:
            out[name] = dict(zip(COUNTERS, values, strict=True))
    leaves = [name for name in out if name.startswith(f"{KV.name}.")]
    if leaves:
        out[KV.name] = {key: sum(out[leaf][key] for leaf in leaves) for key in COUNTERS}
        if not levels:
            for leaf in leaves:
                del out[leaf]
    return out




def all_counters(ifnames: list[str], include_link: bool = False, levels: bool = False,
                 netns: dict[str, str] | None = None) -> dict[str, dict[str, dict[str, int]]]:
    """Per interface, per traffic class: bytes, packets, drops, overlimits, backlog.

    The switch ports: in the root namespace, or where `netns` (interface -> namespace
    path) puts them when the fabric is split over several OVS daemons; one netlink
    socket per namespace.
    """
    out = {}
    for got in per_namespace(ifnames, netns, lambda _ipr, names: _counters(
            names, include_link, levels), rtnl=False):
        out.update(got)
    return out


def per_namespace(ifnames: list[str], netns: dict[str, str] | None, fn,
                  rtnl: bool = True) -> list:
    """fn(ipr, names) once per namespace the interfaces live in (`netns`: interface ->
    namespace path; the root namespace for the rest); a namespace that does not exist
    (yet, or any more) is skipped, as a missing interface is."""
    groups: dict[str | None, list[str]] = {}
    for name in ifnames:
        groups.setdefault((netns or {}).get(name), []).append(name)
    return [in_namespace(path, lambda ipr, names=names: fn(ipr, names), rtnl)
            for path, names in groups.items() if path is None or os.path.exists(path)]


def ifindexes(ifnames: list[str]) -> dict[str, int]:
    """name -> ifindex in the namespace this thread is in; missing interfaces left out.
    (The kernel's own lookup: cheaper than a netlink dump for a handful of names.)"""
    out = {}
    for name in ifnames:
        with suppress(OSError):
            out[name] = socket.if_nametoindex(name)
    return out


def _counters(ifnames: list[str], include_link: bool, levels: bool) -> dict:
    return {name: _by_name(raw, include_link, levels)
            for name, raw in read_classes(ifindexes(ifnames)).items()}


def read_shaping(ifnames: list[str], netns: dict[str, str] | None = None) -> dict[str, dict]:
    """What the kernel applies on each interface, read back (`netns` as all_counters'):
    the HTB link class's rate in bits per wall second and every leaf fifo's limit, in
    packets or (bfifo) bytes."""
    def read(ipr, names):
        out = {}
        for name in names:
            idx = _index(ipr, name)
            link = next(c for c in ipr.get_classes(index=idx) if c["handle"] == PARENT)
            leaves = [q for q in ipr.get_qdiscs(index=idx) if q.get_attr("TCA_KIND") in
                      ("pfifo", "bfifo")]
            out[name] = {"rate_bps": 8 * link.get_attr("TCA_OPTIONS").get_attr(
                             "TCA_HTB_PARMS")["rate"],
                         "limits": sorted({(q.get_attr("TCA_KIND"),
                                            q.get_attr("TCA_OPTIONS")["limit"])
                                           for q in leaves})}
        return out
    found: dict[str, dict] = {}
    for got in per_namespace(ifnames, netns, read):
        found.update(got)
    return found


def read_rto_min_ms(netns: str | None) -> list[int]:
    """The rto_min (wall ms) of every route of the main table in a namespace that sets one."""
    def read(ipr):
        out = []
        for route in ipr.get_routes(family=socket.AF_INET, table=254):
            metrics = route.get_attr("RTA_METRICS")
            value = metrics.get_attr("RTAX_RTO_MIN") if metrics else None
            if value is not None:
                out.append(int(value))
        return out
    return in_namespace(netns, read)


def serve_counters(lines, write) -> None:
    """Answer counter requests, one JSON line each, until the input ends: a request is
    {"names": [...], "link": bool, "levels": bool}, the answer all_counters' mapping for
    the names this machine has. The cluster edition keeps one running on every other
    server (over SSH) so the poller and the fidelity monitor read their switches."""
    for line in lines:
        if not line.strip():
            continue
        ask = json.loads(line)
        write(json.dumps(all_counters(list(ask["names"]), include_link=bool(ask.get("link")),
                                      levels=bool(ask.get("levels")))) + "\n")


def main(argv: list[str]) -> int:
    """`python -m testbed.datapath.tc install [--netns PATH] [--kv-ports LOW-HIGH|none]
    IFNAME RATE_BPS PACKETS KV_LEVELS bytes|packets[@FRAME_BYTES] [[--netns PATH] IFNAME
    ...]`: the HTB tree on each interface, its leaves PACKETS deep (replica.leaf_packets;
    with bytes, that many frames' worth; @FRAME_BYTES: frames of that size,
    emulation.frame_bytes), in the namespace of the `--netns` before it (else the caller's
    own), the TCP ports of the `--kv-ports` before it classified KV (install_htb); the
    cluster edition runs it on other machines, once per machine for all of its switches
    and hosts (a Python start costs seconds in a slow VM). The short form `install IFNAME
    RATE_BPS PACKETS [KV_LEVELS]` shapes one interface with packet-limited queues.
    `python -m testbed.datapath.tc serve`: answer counter requests on stdin (serve_counters)."""
    if argv == ["serve"]:
        def write(text: str) -> None:
            sys.stdout.write(text)
            sys.stdout.flush()
        serve_counters(sys.stdin, write)
        return 0
    args = argv[1:]
    if argv[:1] != ["install"] or not args:
        print(main.__doc__, file=sys.stderr)
        return 2
    if len(args) in (3, 4):
        args = [*args, *(["0"] if len(args) == 3 else []), "packets"]
    groups, netns, ports = [], None, ()
    while args:
        if args[0] == "--netns" and len(args) > 1:
            netns, args = args[1], args[2:]
            continue
        if args[0] == "--kv-ports" and len(args) > 1:
            ports, args = _port_range(args[1]), args[2:]
            if ports is None:
                print(main.__doc__, file=sys.stderr)
                return 2
            continue
        group, args = args[:5], args[5:]
        limit, _, frame = group[4].partition("@") if len(group) == 5 else ("", "", "")
        if limit not in ("bytes", "packets") or {"--netns", "--kv-ports"} & set(group) or (
                frame and not (frame.isdigit() and MIN_FRAME <= int(frame) <= WIRE_FRAME)):
            print(main.__doc__, file=sys.stderr)
            return 2
        groups.append((netns, ports, group))
    for netns, ports, (ifname, rate, packets, levels, limit) in groups:
        limit, _, frame = limit.partition("@")
        install_htb(ifname, float(rate), netns=netns, packets=int(packets),
                    kv_levels=int(levels), byte_limit=limit == "bytes",
                    frame_bytes=int(frame or WIRE_FRAME), kv_ports=ports)
    return 0


def port_range(ports: tuple[int, ...]) -> str:
    """`--kv-ports`'s value for a block of consecutive ports (none: empty)."""
    return f"{ports[0]}-{ports[-1]}" if ports else "none"


def _port_range(text: str) -> tuple[int, ...] | None:
    if text == "none":
        return ()
    low, _, high = text.partition("-")
    if not (low.isdigit() and high.isdigit() and 0 < int(low) <= int(high) <= 65535):
        return None
    return tuple(range(int(low), int(high) + 1))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
