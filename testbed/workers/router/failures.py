"""Faults on an emulated run, as the router sees and makes them: missed heartbeats
declaring a decode instance dead, the scenario's fault schedule injected (kills,
SIGSTOP, link changes), and the requests a failure takes with it."""

from __future__ import annotations

import os
import signal
import threading

from testbed.lifecycle import RequestState
from testbed.topologies.placement import interface_netns, private_daemons
from testbed.workers.router.fault_state import fault_interfaces, set_links


class RouterFaults:
    """Router's fault detection, injection and failed requests."""

    def _heartbeats_at(self, due: float) -> None:
        self.loop.at(due, lambda: self._check_heartbeats(due))

    def _check_heartbeats(self, due: float) -> None:
        """Declare dead a decode silent for missed_heartbeats periods of the router's
        listening. A check held up for more than a period is a stall of this router (or of
        the whole machine: on a loaded CI host every process once stalled 11 s at once): the
        heartbeats sent meanwhile wait behind it, so its time does not count as anyone's
        silence. Stalls add up rather than reset the count, so a router late on every check
        still declares a dead decode after missed_heartbeats periods of listening."""
        rc, now, faults = self.scenario.recovery, self.loop.now, self.faults
        if now - due > rc.heartbeat_s:
            faults.stalls.append((due, now))
        limit = rc.missed_heartbeats * rc.heartbeat_s
        for name in list(self.views):
            if name not in self.plane.dead and faults.silence(name, now) > limit:
                self._declare_dead(name)
        faults.forget_stalls([n for n in self.views if n not in self.plane.dead])
        if not self.finished:
            self._heartbeats_at(now + rc.heartbeat_s)

    def _declare_dead(self, name: str) -> None:
        for rid, holder in list(self.fetching.items()):
            if holder == name:  # the prefill computes that prefix itself
                del self.fetching[rid]
                rs = self.states[rid]
                if rs.prefill is not None:
                    self.send(rs.prefill, {"type": "fetch_failed", "request": rid,
                                            "reason": f"holder {name} declared dead"})
        self.faults.log.append({"time": self.loop.now, "event": "declared dead", "target": name})
        self.plane.declare_dead(name, list(self.states.values()))
        self._check_done()

    def _inject(self, fault) -> None:
        """Make a scenario fault happen on the real system, at its modelled time."""
        self.faults.log.append({"time": self.loop.now, "event": fault.kind,
                                "target": fault.target})
        back = self.loop.clock.spans.wall(fault.duration_s) if fault.duration_s else None
        try:
            if fault.kind == "decode_down":
                os.kill(self.pids[fault.target], signal.SIGKILL)
            elif fault.kind == "controller_down" and self.cfg.controller_pid:
                os.kill(self.cfg.controller_pid, signal.SIGSTOP)
                if back:
                    threading.Timer(back, os.kill, (self.cfg.controller_pid,
                                                    signal.SIGCONT)).start()
            elif fault.kind in ("link_down", "tor_down"):
                fabric = self.scenario.fabric()
                intfs = fault_interfaces(fabric, fault)
                where = interface_netns(fabric, private_daemons(self.scenario.emulation))
                set_links(intfs, up=False, netns=where)
                if back:
                    threading.Timer(back, set_links, (intfs, True, where)).start()
            elif fault.kind == "background":
                self._broadcast({"type": "surge", "tier": fault.tier,
                                 "fraction": fault.fraction,
                                 "until": self.loop.now + (fault.duration_s or 1e9)})
        except (OSError, KeyError) as exc:
            self.ledger.errors.append(f"fault {fault.kind} {fault.target}: {exc}")

    def _fail(self, rs: RequestState, reason: str) -> None:
        if rs.decode is not None and rs.transfer_end is None:
            self.send(rs.decode, {"type": "cancel", "request": rs.req.request_id,
                                   "reason": reason})
        self.plane.end(rs, "failed", reason)

    def _fail_involving(self, name: str, reason: str) -> None:
        for rs in self.states.values():
            if rs.state is None and name in (rs.prefill, rs.decode):
                self._fail(rs, reason)
        self._check_done()

    def _transfer_failed(self, rs: RequestState, decode: str, reason: str) -> None:
        if rs.state is None and rs.decode == decode and decode not in self.plane.dead:
            self._fail(rs, reason)
