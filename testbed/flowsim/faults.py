"""A scenario's fault schedule in the flow engine: links and decode instances failing
and coming back, and when the control plane notices a dead instance."""

from __future__ import annotations

from typing import Protocol

from testbed.control.network_seam import SimulatedNetwork
from testbed.control.plane import ControlPlane
from testbed.flowsim.events import EventLoop
from testbed.flowsim.reuse_fetch import REUSE, Fetch
from testbed.lifecycle import RequestState
from testbed.model.kv import ModelSpec, kv_bytes_per_token
from testbed.model.timing import TimingModel
from testbed.scenario import Scenario
from testbed.serving import DecodeInstance, PrefillInstance
from testbed.topologies.fattree import FatTreeSpec


class FaultHost(Protocol):
    """What FaultEvents uses of the class it is mixed into (FlowSimulation)."""

    scenario: Scenario
    spec: FatTreeSpec
    model: ModelSpec
    timing: TimingModel
    loop: EventLoop
    net: SimulatedNetwork
    plane: ControlPlane
    prefill: dict[str, PrefillInstance]
    decode: dict[str, DecodeInstance]
    fetches: dict[str, Fetch]
    failed: set[str]  # decode instances that died
    states: list[RequestState]
    faults_log: list[dict]
    bg_override: dict[int, float]  # tier -> a background fault's fraction
    controller_back_at: float  # the oracle does not refresh before this

    def _background(self) -> None: ...

    def _reschedule_network(self) -> None: ...


class FaultEvents:
    """FlowSimulation's faults (the schedule is a property of the scenario; the host: a
    FaultHost)."""

    # -- faults --------------------------------------------------------------------------
    def _fault(self, fault) -> None:
        now = self.loop.now
        self.faults_log.append({"time": now, "kind": fault.kind, "target": fault.target})
        back = now + fault.duration_s if fault.duration_s else None
        if fault.kind == "decode_down":
            self._decode_down(fault.target)
        elif fault.kind == "controller_down":
            self.controller_back_at = back if back is not None else float("inf")
        elif fault.kind == "background":
            self.bg_override[fault.tier] = fault.fraction
            self._background()
            if back is not None:
                self.loop.at(back, lambda: (self.bg_override.pop(fault.tier, None),
                                            self._background()))
        else:  # link_down | tor_down
            links = [(lk.a, lk.b) for lk in self.spec.links
                     if fault.target in (f"{lk.a}-{lk.b}", f"{lk.b}-{lk.a}")
                     or (fault.kind == "tor_down" and fault.target in (lk.a, lk.b))]
            self._links(links, up=False)
            if back is not None:
                self.loop.at(back, lambda: self._links(links, up=True))

    def _links(self, links, up: bool) -> None:
        for a, b in links:
            self.net.set_link(a, b, up, self.loop.now)
        self._reschedule_network()

    def _decode_down(self, name: str) -> None:
        self.failed.add(name)
        self.decode[name].fail()
        self.net.remove_flows(self.loop.now, lambda f: f.tag[1] == REUSE
                              and self.fetches[f.tag[0].req.request_id].holder == name)
        for rid, fetch in list(self.fetches.items()):
            if fetch.holder == name:
                del self.fetches[rid]
                tokens = round(fetch.size / kv_bytes_per_token(self.model))
                self.prefill[fetch.prefill].fetch_failed(rid, self.timing.prefill_per_token_s * tokens)
        self.net.remove_flows(self.loop.now, lambda f: f.tag[0].decode == name)
        self._reschedule_network()
        rc = self.scenario.recovery
        self.loop.after(rc.missed_heartbeats * rc.heartbeat_s, lambda: self._detected(name))

    def _detected(self, name: str) -> None:
        """The router's failure detector notices: flows into it stop, its requests recover."""
        self.net.remove_flows(self.loop.now, lambda f: f.tag[0].decode == name)
        self._reschedule_network()
        self.plane.declare_dead(name, self.states)
