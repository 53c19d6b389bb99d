"""The router's side of faults: what its failure detector and oracle watch have seen, and
making a scenario's link and ToR failures happen on the emulated fabric. (Recovery is the
control plane's: testbed/control/plane.py.)"""

from __future__ import annotations


class FaultState:
    def __init__(self):
        self.last_beat: dict[str, float] = {}
        self.stalls: list[tuple[float, float]] = []  # the router's own, (start, end)
        self.max_age = 0.0
        self.log: list[dict] = []

    def silence(self, name: str, now: float) -> float:
        """How long `name` has been silent while the router was listening: since its last
        heartbeat, less the router's own stalls since then (heartbeats sent during one
        wait behind it, so its time says nothing about the sender)."""
        heard = self.last_beat.get(name, 0.0)
        deaf = sum(end - max(start, heard) for start, end in self.stalls if end > heard)
        return now - heard - deaf

    def forget_stalls(self, names) -> None:
        """Drop the stalls that ended before every one of `names` was last heard."""
        oldest = min((self.last_beat.get(n, 0.0) for n in names), default=None)
        if oldest is not None:
            self.stalls = [s for s in self.stalls if s[1] > oldest]

    def note_oracle_age(self, age: float) -> None:
        self.max_age = max(self.max_age, age)


def fault_interfaces(fabric, fault) -> list[str]:
    """The switch-side interfaces of a failing link or ToR."""
    out = []
    for link in fabric.links:
        names = (f"{link.a}-{link.b}", f"{link.b}-{link.a}")
        hit = fault.target in names if fault.kind == "link_down" else \
            fault.target in (link.a, link.b)
        if hit:
            out += [fabric.intf_name(n, link.port_of(n)) for n in (link.a, link.b)
                    if n in fabric.switches]
    return out


def set_links(interfaces: list[str], up: bool, netns: dict[str, str] | None = None) -> None:
    """Switch ports up or down, each in its namespace (`netns`: interface -> namespace
    path, for a fabric split over several OVS daemons; the root namespace otherwise)."""
    from testbed.datapath.tc import per_namespace

    def apply(ipr, names):
        for name in names:
            idx = ipr.link_lookup(ifname=name)
            if idx:  # none without a fabric (the local launcher's runs)
                ipr.link("set", index=idx[0], state="up" if up else "down")

    per_namespace(interfaces, netns, apply)
