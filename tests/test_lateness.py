"""How late workers ran, and the CPU verdict built on it: judged by what a shortage of CPU
does (late timers, pushes and datapath held off a core), the machine's busy share only
where none of that was measured."""

import threading
import time

import pytest

from testbed.clock import RunClock
from testbed.emulation import judge
from testbed.workers import lateness
from testbed.workers.realtime import RealTimeLoop

pytestmark = pytest.mark.serial  # a thread's wait for a core, measured: runs alone

OK = judge.LinkFidelity("a", "tor0>agg0", 10e6, 9.9e6, 6)
CALM = judge.ThreadLoad("ovs-vswitchd", "ovs-vswitchd", "main", 0.6, 0.7, 0.02, 40e-6)


def timers(p99_ms: float, count: int = 1000, max_ms: tuple[float, float] = (6.0, 3.0)) -> dict:
    return {"i0": {"count": count, "p99_ms": p99_ms, "p99_wall_ms": 2 * p99_ms,
                   "max_ms": max_ms[0]},
            "router": {"count": count, "p99_ms": 0.1, "p99_wall_ms": 0.2, "max_ms": max_ms[1]}}


def test_the_loop_records_each_timer_late_by_the_time_it_was_kept_waiting(tmp_path):
    loop = RealTimeLoop(RunClock(time.time(), 2.0))
    loop.at(loop.now + 0.005, lambda: None)  # before watch(): not counted
    loop.watch(probe_s=0.01)
    loop.at(loop.now, lambda: time.sleep(0.05))  # holds the loop: the next timer is late
    loop.at(loop.now + 0.001, lambda: None)
    loop.at(loop.now + 0.06, loop.stop)
    loop.run()
    xs = sorted(loop.lateness.samples)
    assert len(xs) >= 4  # probes, the two timers and the stop
    assert xs[-1] >= 0.045  # the timer behind the 50 ms sleep
    doc = loop.lateness.summary(dilation=2.0)
    assert doc["count"] == len(xs) and doc["max_ms"] == pytest.approx(doc["max_wall_ms"] / 2)
    due, woke = doc["late_spans"][0]  # the latest first, with when it was due and ran
    assert woke - due == pytest.approx(xs[-1]) and due >= loop.lateness.since
    loop.lateness.write(tmp_path, "i3", 2.0)
    assert lateness.read(tmp_path) == {"i3": doc}
    assert lateness.read(tmp_path / "nothing") == {}
    lateness.clear(tmp_path)  # a folder run again starts without the last run's figures
    assert lateness.read(tmp_path) == {}


def test_a_push_thread_reads_its_own_run_queue_wait():
    got = []
    t = threading.Thread(target=lambda: got.append(lateness.run_queue_wait()))
    t.start()
    t.join()
    assert got[0] is None or got[0] >= 0.0
    rows = [{"start": 0.0, "end": 1.0, "cpu_wait_s": 0.1}, {"start": 1.0, "end": 2.0,
            "cpu_wait_s": 0.0}, {"start": 0.0, "end": 1.0, "cpu_wait_s": ""}]
    doc = lateness.push_waits(rows)
    assert doc["count"] == 2 and doc["share"] == pytest.approx(0.05)
    assert lateness.push_waits([{"start": 0, "end": 1}]) is None


def test_a_busy_machine_whose_parts_all_ran_on_time_is_faithful_with_a_warning():
    doc = judge.verdict([OK], [0.99], threads=[CALM], timers=timers(0.4),
                        pushes={"count": 100, "share": 0.001})
    assert doc["verdict"] == "faithful" and not doc["cpu_bound"]
    assert "headroom 1%" in doc["warnings"][0]
    assert doc["datapath_held"] == pytest.approx(0.02 / 0.62)
    assert doc["timers"][0]["process"] == "i0"  # latest first


@pytest.mark.parametrize("late", ["timers", "pushes", "datapath"])
def test_a_run_held_off_the_cpu_is_cpu_bound_whatever_the_machine_average(late):
    # the datapath forwarding 60% of the time and waiting for a core 12%: held back 17%
    # of the time it had work
    waiting = judge.ThreadLoad("ovs-vswitchd", "ovs-vswitchd", "main", 0.6, 0.7, 0.12)
    background = judge.ThreadLoad("ovs-vswitchd", "ct_clean3", "other", 0.0, 0.01, 0.5)
    doc = judge.verdict([OK], [0.3], threads=[waiting if late == "datapath" else CALM, background],
                        timers=timers(5.0 if late == "timers" else 0.4),
                        pushes={"count": 100, "share": 0.2 if late == "pushes" else 0.001})
    assert doc["verdict"] == "unfaithful" and doc["cpu_bound"]
    assert len(doc["reasons"]) == 1 and "CPU-bound" in doc["reasons"][0]
    assert {"timers": "i0", "pushes": "20.0%", "datapath": "17%"}[late] in doc["reasons"][0]
    assert "time_dilation" in doc["advice"][0]


def test_a_stall_of_every_process_at_once_is_cpu_bound_though_each_p99_is_on_time():
    # a loaded CI host stopped the whole run for 11.4 s once: one timer per process
    doc = judge.verdict([OK], [0.3], threads=[CALM], timers=timers(0.4, max_ms=(5700, 5690)))
    assert doc["verdict"] == "unfaithful" and doc["cpu_bound"]
    assert len(doc["reasons"]) == 1 and "stalled" in doc["reasons"][0]
    assert "5690 ms" in doc["reasons"][0]
    # one process alone that late (a decode stopped by a fault) is no machine stall
    alone = judge.verdict([OK], [0.3], threads=[CALM], timers=timers(0.4, max_ms=(5700, 3)))
    assert alone["verdict"] == "faithful"


def test_a_stall_is_every_process_late_at_the_same_time_not_each_once():
    def at(*spans):  # each process: p99 on time, its late wake-ups [due, ran] (wall s)
        return {f"p{k}": {"count": 1000, "p99_ms": 0.4, "max_ms": 500 * max(b - a for a, b in s),
                          "dilation": 2.0, "late_spans": [list(x) for x in s]}
                for k, s in enumerate(spans)}

    # the machine stopped from t=100.0 to 100.5: each process ran its due timer after it
    together = at([(100.02, 100.5), (30.0, 30.001)], [(100.0, 100.51)], [(100.3, 100.5)])
    doc = judge.verdict([OK], [0.3], threads=[CALM], timers=together)
    assert doc["verdict"] == "unfaithful" and "late at once for 100 ms" in doc["reasons"][0]
    # each one as late, at different moments (a collector pause here, a fault there)
    apart = at([(10.0, 10.5)], [(20.0, 20.5)], [(30.0, 30.5)])
    assert judge.verdict([OK], [0.3], threads=[CALM], timers=apart)["verdict"] == "faithful"
    # overlapping, but one of them late by less than the limit there (modelled: wall /
    # dilation), its long wait at another moment
    short = at([(100.0, 100.5)], [(100.0, 100.5)], [(100.45, 100.5), (50.0, 50.5)])
    assert judge.verdict([OK], [0.3], threads=[CALM], timers=short)["verdict"] == "faithful"


def test_a_datapath_thread_with_little_work_is_not_judged_by_its_share_of_it():
    # another fabric's daemon, idle once its runs ended: 1% busy, 1% waiting
    idle = judge.ThreadLoad("ovs-vswitchd@netkv-l1-ovs0", "ovs-vswitchd", "main", 0.01, 0.02,
                            0.01)
    doc = judge.verdict([OK], [0.3], threads=[CALM, idle], timers=timers(0.4))
    assert doc["verdict"] == "faithful"
    assert doc["datapath_held"] == pytest.approx(0.02 / 0.62)


def test_without_any_lateness_measured_the_machine_average_decides():
    doc = judge.verdict([OK], [0.99])
    assert doc["cpu_bound"] and "headroom" in doc["reasons"][0]
    few = judge.verdict([OK], [0.99], timers=timers(0.1, count=10),
                        pushes={"count": 3, "share": 0.0})  # too few samples to count
    assert few["cpu_bound"] and "nothing measured" in few["cpu_test"]
