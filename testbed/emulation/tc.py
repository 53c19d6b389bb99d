"""The one owner of tc: an HTB tree per sending interface, configured with pyroute2.

Tree on every egress (switch ports, and host NICs inside their namespaces):
  1:   htb, default -> background
  1:1  rate = ceil = link rate
  1:10 control, 1:20 kv, 1:30 background: rate = share x link, ceil = link, prio
  each class ends in a pfifo about 50 ms deep at the link rate (the kernel default,
  1000 packets, is seconds of queue at emulated rates and slows TCP's convergence)
  u32 filters on the IPv4 TOS byte (DSCP bits, mask 0xfc) steer control and kv.
Mininet's TCLink is not used for shaping (it would fight this tree: mininet #243, #632).
"""

from __future__ import annotations

import math
from contextlib import contextmanager, suppress

from pyroute2 import IPRoute, NetlinkError, NetNS

from testbed.topologies.traffic_classes import CLASSES, DEFAULT_CLASS, TrafficClass

ROOT = 0x10000
PARENT = 0x10001
QUEUE_S = 0.05  # leaf FIFO depth in seconds at the link rate: switch-like, not bufferbloat
MIN_QUEUE_PACKETS = 16


def _bits(rate_bps: float) -> str:
    return f"{max(int(rate_bps), 8000)}bit"


@contextmanager
def netlink(netns: str | None = None):
    """IPRoute in the root namespace, or NetNS for a namespace path (/proc/PID/ns/net)."""
    handle = NetNS(netns) if netns else IPRoute()
    try:
        yield handle
    finally:
        handle.close()


def _index(ipr, ifname: str) -> int:
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise RuntimeError(f"interface {ifname} not found")
    return found[0]


def install_htb(ifname: str, rate_bps: float, netns: str | None = None) -> None:
    """Replace whatever root qdisc the interface has with the project's HTB tree."""
    with netlink(netns) as ipr:
        idx = _index(ipr, ifname)
        with suppress(NetlinkError):  # no root qdisc yet
            ipr.tc("del", index=idx)
        ipr.tc("add", "htb", idx, ROOT, default=DEFAULT_CLASS.classid_minor)
        ipr.tc("add-class", "htb", idx, PARENT, parent=ROOT, rate=_bits(rate_bps),
               ceil=_bits(rate_bps))
        limit = queue_packets(rate_bps)
        for c in CLASSES:
            ipr.tc("add-class", "htb", idx, ROOT | c.classid_minor, parent=PARENT,
                   rate=_bits(rate_bps * c.share), ceil=_bits(rate_bps), prio=c.prio)
            ipr.tc("add", "pfifo", idx, c.classid_minor << 16, parent=ROOT | c.classid_minor,
                   limit=limit)
        for pref, c in enumerate((c for c in CLASSES if c is not DEFAULT_CLASS), start=1):
            ipr.tc("add-filter", "u32", idx, parent=ROOT, prio=pref, protocol=0x0800,
                   target=ROOT | c.classid_minor, keys=[_tos_key(c)])


def queue_packets(rate_bps: float, mtu: int = 1500) -> int:
    return max(MIN_QUEUE_PACKETS, math.ceil(rate_bps * QUEUE_S / (mtu * 8)))


def _tos_key(c: TrafficClass) -> str:
    """u32 key on the TOS byte: 32-bit word at offset 0, byte 1, DSCP bits only."""
    return f"0x{c.tos << 16:08x}/0x00fc0000+0"


LINK = "link"  # the root class 1:1: the whole link, for saturation checks


def _read_classes(ipr, idx: int, include_link: bool = False) -> dict[str, dict[str, int]]:
    by_minor = {c.classid_minor: c.name for c in CLASSES}
    if include_link:
        by_minor[PARENT & 0xFFFF] = LINK
    out: dict[str, dict[str, int]] = {}
    for cls in ipr.get_classes(index=idx):
        name = by_minor.get(cls["handle"] & 0xFFFF)
        stats = cls.get_attr("TCA_STATS2")
        if name is None or stats is None:
            continue
        basic = stats.get_attr("TCA_STATS_BASIC") or {}
        queue = stats.get_attr("TCA_STATS_QUEUE") or {}
        out[name] = {
            "bytes": int(basic.get("bytes", 0)),
            "packets": int(basic.get("packets", 0)),
            "drops": int(queue.get("drops", 0)),
            "overlimits": int(queue.get("overlimits", 0)),
            "backlog": int(queue.get("backlog", 0)),
        }
    return out


def class_counters(ifname: str, netns: str | None = None) -> dict[str, dict[str, int]]:
    """Per traffic class: bytes, packets, drops, overlimits, backlog (bytes)."""
    with netlink(netns) as ipr:
        return _read_classes(ipr, _index(ipr, ifname))


def all_counters(ifnames: list[str], include_link: bool = False
                 ) -> dict[str, dict[str, dict[str, int]]]:
    """class_counters for many root-namespace interfaces over one netlink socket."""
    with netlink() as ipr:
        index = {link.get_attr("IFLA_IFNAME"): link["index"] for link in ipr.get_links()}
        return {name: _read_classes(ipr, index[name], include_link)
                for name in ifnames if name in index}
