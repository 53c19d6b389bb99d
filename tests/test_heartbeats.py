"""The router's failure detector blames a decode for its silence, not for the router's
own stall (no processes: the detector's arithmetic on a loop whose clock we set)."""

from __future__ import annotations

from types import SimpleNamespace

from testbed.workers.router.failures import RouterFaults
from testbed.workers.router.fault_state import FaultState


class Loop:
    def __init__(self):
        self.now, self.timers = 0.0, []

    def at(self, when, job):
        self.timers.append((when, job))

    def run_next(self, late: float = 0.0) -> None:
        """The earliest timer, `late` modelled seconds after it was due."""
        self.timers.sort(key=lambda t: t[0])
        when, job = self.timers.pop(0)
        self.now = when + late
        job()


class Detector(RouterFaults):
    def __init__(self, names):
        self.scenario = SimpleNamespace(recovery=SimpleNamespace(heartbeat_s=0.5, missed_heartbeats=3))
        self.loop, self.views, self.finished = Loop(), {n: None for n in names}, False
        self.plane = SimpleNamespace(dead=set())
        self.faults = FaultState()
        self.faults.last_beat = {n: 0.0 for n in names}
        self.declared = []

    def _declare_dead(self, name):
        self.declared.append((self.loop.now, name))
        self.plane.dead.add(name)

    def beat(self, name):
        self.faults.last_beat[name] = self.loop.now


def test_a_check_held_up_by_a_stall_of_the_whole_machine_declares_nobody_dead():
    d = Detector(["i2", "i3"])
    d._heartbeats_at(0.5)
    d.loop.run_next()  # 0.5: on time
    d.beat("i2")
    d.beat("i3")
    d.loop.run_next(late=11.4)  # due at 1.0, runs at 12.4: every process was stopped
    assert d.declared == []  # silent 11.9 s, of which 11.4 the router's own
    d.beat("i2")  # the heartbeats that waited in the inbox; i3's never comes
    d.loop.run_next(late=0.01)  # ~12.9, a few ms late, as every timer is: not a stall
    d.beat("i2")
    assert d.declared == []  # i3 silent 0.5 s before the stall and 0.51 s after it
    d.loop.run_next(late=0.01)  # ~13.4: 0.5 + 1.02 s of the router listening > 3 x 0.5
    assert [name for _, name in d.declared] == ["i3"]
    assert abs(d.declared[0][0] - 13.42) < 1e-9


def test_a_router_late_on_every_check_still_declares_a_silent_decode_dead():
    d = Detector(["i2", "i3"])  # i3 never beats; i2 after every check
    d._heartbeats_at(0.5)
    for _ in range(3):  # each check 0.6 s late (a stall), 1.1 s apart: 0.5 s listened
        d.loop.run_next(late=0.6)
        d.beat("i2")
    assert d.declared == []  # i3 silent 3 x 0.5 s of listening: not more than 1.5 s
    d.loop.run_next(late=0.6)
    assert d.declared == [(4.4, "i3")]  # 2.0 s of listening; i2 never
    for _ in range(20):
        d.loop.run_next(late=0.6)
        d.beat("i2")
    assert [name for _, name in d.declared] == ["i3"]
    assert len(d.faults.stalls) <= 1  # stalls before every live decode's last beat go


def test_a_silent_decode_is_declared_dead_after_its_missed_heartbeats():
    d = Detector(["i2", "i3"])
    d._heartbeats_at(0.5)
    for _ in range(4):  # 0.5 .. 2.0: i2 beats each period, i3 never
        d.loop.run_next()
        d.beat("i2")
    assert d.declared == [(2.0, "i3")]  # silent 2.0 s > 3 x 0.5
