"""The fidelity monitor's per-thread view: /proc parsing, loads over loaded intervals,
and a datapath-bound verdict with advice that fits the datapath."""

import os
import threading
import time

import pytest

from testbed.emulation import judge, threads


def _write_thread(proc, pid, tid, comm, utime, stime, waited_ns=None, runs=4):
    task = proc / str(pid) / "task" / str(tid)
    task.mkdir(parents=True, exist_ok=True)
    rest = " ".join(["S"] + ["0"] * 10 + [str(utime), str(stime)] + ["0"] * 20)
    (task / "stat").write_text(f"{tid} ({comm}) {rest}\n")
    if waited_ns is not None:  # run time, run-queue wait, timeslices
        (task / "schedstat").write_text(f"123 {waited_ns} {runs}\n")


def _fake_proc(tmp_path, main_ticks, pmd_ticks, worker_ticks, main_waited_ns=0, main_runs=4):
    proc = tmp_path / "proc"
    (proc / "700").mkdir(parents=True, exist_ok=True)
    (proc / "700" / "comm").write_text("ovs-vswitchd\n")
    _write_thread(proc, 700, 700, "ovs-vswitchd", main_ticks, 0, main_waited_ns, main_runs)
    _write_thread(proc, 700, 703, "pmd-c01/id:9", pmd_ticks, 0)
    _write_thread(proc, 700, 704, "handler3", 1, 1)
    (proc / "900").mkdir(exist_ok=True)
    (proc / "900" / "comm").write_text("python3\n")
    _write_thread(proc, 900, 900, "python3", 0, 0)  # its main thread idles ...
    rest = " ".join(["S"] + ["0"] * 10 + [str(worker_ticks), "0"] + ["0"] * 20)
    (proc / "900" / "stat").write_text(f"900 (python3) {rest}\n")  # ... the process works
    return proc


def test_stat_lines_with_spaces_and_parentheses_in_the_name():
    comm, ticks = threads.parse_stat("42 (we (ird) name) R " + " ".join(["1"] * 10) +
                                     " 30 12 " + " ".join(["0"] * 20))
    assert comm == "we (ird) name" and ticks == 42
    assert [threads.datapath_role(c, m) for c, m in
            [("ovs-vswitchd", True), ("pmd-c02/id:5", False), ("handler12", False),
             ("revalidator3", False), ("urcu2", False)]] == \
        ["main", "pmd", "handler", "revalidator", "other"]


def test_sampler_finds_the_datapath_and_the_workers_and_gives_shares(tmp_path):
    tick = threads.TICKS_PER_S
    proc = _fake_proc(tmp_path, 0, 0, 0)
    sampler = threads.ThreadSampler(lambda: {"decode-1": 900}, proc=proc)
    assert sampler.sample(0.0) == {}  # the first reading is a baseline
    _fake_proc(tmp_path, int(0.96 * tick), int(0.25 * tick), int(0.5 * tick))
    got = sampler.sample(1.0)
    by_role = {(p, role): share for (p, _, role, _), share in got.items()}
    assert abs(by_role[("ovs-vswitchd", "main")] - 0.96) < 0.02
    assert abs(by_role[("ovs-vswitchd", "pmd")] - 0.25) < 0.02
    assert abs(by_role[("decode-1", "worker")] - 0.5) < 0.02
    assert by_role[("ovs-vswitchd", "handler")] == 0.0


def test_the_time_a_datapath_thread_waited_for_a_core_is_sampled_and_summed_up(tmp_path):
    proc = _fake_proc(tmp_path, 0, 0, 0, main_waited_ns=10**9)
    sampler = threads.ThreadSampler(lambda: {"decode-1": 900}, proc=proc)
    sampler.sample(0.0)
    _fake_proc(tmp_path, 50, 0, 0, main_waited_ns=10**9 + 2 * 10**8,  # 0.2 s in 1 s
               main_runs=104)  # over 100 times on a core
    sampler.sample(1.0)
    _fake_proc(tmp_path, 100, 0, 0, main_waited_ns=10**9 + 6 * 10**8,  # 0.4 s in 1 s
               main_runs=304)
    sampler.sample(1.0)
    (got,), (later,) = ([share for (_, _, role, _), share in w.items() if role == "main"]
                        for w in sampler.waits)
    assert got == pytest.approx(0.2) and later == pytest.approx(0.4)
    # no schedstat (the pmd, a kernel without it) and workers: no figure, not a zero
    assert not any(role in ("pmd", "worker") for w in sampler.waits for (_, _, role, _) in w)
    loads = judge.thread_loads(sampler.samples, [True, True], sampler.waits, sampler.waited)
    by_role = {t.role: t for t in loads}
    assert by_role["main"].wait_median == pytest.approx(0.3)
    # 0.6 s of waiting over 300 times on a core: 2 ms each time it was woken
    assert by_role["main"].wait_per_run == pytest.approx(0.002)
    only_second = judge.thread_loads(sampler.samples, [False, True], sampler.waits,
                                     sampler.waited)
    assert {t.role: t for t in only_second}["main"].wait_per_run == pytest.approx(0.002)
    assert by_role["pmd"].wait_median is None and by_role["worker"].wait_median is None
    assert judge._thread_doc(by_role["main"])["wait_median"] == pytest.approx(0.3)


def test_this_kernel_says_how_long_a_thread_waited_for_a_core():
    task = f"/proc/self/task/{threading.get_native_id()}"
    if not os.path.exists(f"{task}/schedstat"):
        pytest.skip("this kernel has no schedstat (CONFIG_SCHED_INFO off)")
    waited, runs = threads.read_schedstat(threads.Path(task))
    assert isinstance(waited, int) and runs > 0


def test_a_busy_thread_of_this_process_is_seen_in_the_real_proc():
    """The real /proc: a thread that has burnt 0.3 s of its own CPU time shows at least
    that much (CPU time, not wall time, so a loaded machine cannot make it flaky)."""
    spun, done = threading.Event(), threading.Event()
    ident: list[int] = []

    def spin():
        ident.append(threading.get_native_id())
        start = time.thread_time()
        while time.thread_time() - start < 0.3:
            pass
        spun.set()
        done.wait()

    worker = threading.Thread(target=spin)
    worker.start()
    try:
        assert spun.wait(60)
        seen = {t.tid: t for t in threads.read_threads({threads.VSWITCHD: os.getpid()})}
    finally:
        done.set()
        worker.join()
    assert seen[ident[0]].role == "other"  # a datapath's threads are read one by one
    assert seen[ident[0]].ticks >= 0.25 * threads.TICKS_PER_S


def test_a_worker_counts_the_cpu_of_its_threads_that_already_exited():
    """A KV push lives in a thread for one transfer: once it ended, the worker's reading
    (its whole process) still holds the CPU it burnt."""
    me = {"me": os.getpid()}
    (before,) = threads.read_threads(me)

    def spin():
        start = time.thread_time()
        while time.thread_time() - start < 0.3:
            pass

    t = threading.Thread(target=spin)
    t.start()
    t.join()
    (after,) = threads.read_threads(me)
    assert after.role == "worker" and after.tid == os.getpid()
    assert after.ticks - before.ticks >= 0.25 * threads.TICKS_PER_S


def test_loads_count_only_the_intervals_that_carried_saturated_links():
    key = ("ovs-vswitchd", "ovs-vswitchd", "main", 700)
    samples = [{key: 0.1}, {key: 0.97}, {key: 0.99}, {key: 0.2}]
    loads = judge.thread_loads(samples, [False, True, True, False])
    assert loads[0].median == pytest.approx(0.98) and loads[0].saturated
    idle = judge.thread_loads(samples, [False] * 4)  # nothing loaded: all intervals
    assert idle[0].median == pytest.approx(0.585) and not idle[0].saturated


def test_a_pegged_datapath_thread_makes_a_run_unfaithful_with_the_fix_that_applies():
    ok = judge.LinkFidelity("a", "tor0>agg0", 10e6, 9.8e6, 6)
    main = judge.ThreadLoad("ovs-vswitchd", "ovs-vswitchd", "main", 0.97, 1.0)
    calm = judge.ThreadLoad("ovs-vswitchd", "ovs-vswitchd", "main", 0.4, 0.6)
    worker = judge.ThreadLoad("decode-1", "python3", "worker", 0.3, 0.5)
    bound = judge.verdict([ok], [0.3], threads=[main, worker], datapath="user")
    assert bound["verdict"] == "unfaithful" and bound["datapath_bound"]
    assert "ovs-vswitchd" in bound["reasons"][0] and "97%" in bound["reasons"][0]
    assert "kernel datapath" in bound["advice"][0] and "ovs_instances" in bound["advice"][0]
    busy = judge.verdict([ok], [0.95], threads=[main], datapath="user")
    assert "ovs_instances" not in busy["advice"][0]  # no idle core for another daemon
    assert bound["datapath_thread"]["role"] == "main"
    kernel = judge.verdict([ok], [0.3], threads=[main], datapath="kernel")
    assert "kernel datapath" not in kernel["advice"][0]
    fine = judge.verdict([ok], [0.3], threads=[calm, worker], datapath="user")
    assert fine["verdict"] == "faithful" and not fine["datapath_bound"] and not fine["advice"]
    assert not fine["warnings"]
    near = judge.ThreadLoad("ovs-vswitchd", "ovs-vswitchd", "main", 0.91, 0.97)
    warned = judge.verdict([ok], [0.3], threads=[near], datapath="user")
    assert warned["verdict"] == "faithful" and "91%" in warned["warnings"][0]
    # nothing saturated to check and the datapath near its ceiling: its packets were lost
    # before any queue could build, so the run is datapath-bound
    blind = judge.verdict([], [0.3], threads=[near], datapath="user")
    assert blind["verdict"] == "unfaithful" and blind["datapath_bound"]
    quiet = judge.verdict([], [0.3], threads=[calm], datapath="user")
    assert not quiet["datapath_bound"]
    polling = judge.ThreadLoad("ovs-vswitchd", "pmd-c01/id:9", "pmd", 1.0, 1.0)
    pmd = judge.verdict([ok], [0.3], threads=[polling, calm], datapath="user")
    assert not pmd["datapath_bound"] and pmd["datapath_thread"]["role"] == "main"
    busy_worker = judge.ThreadLoad("decode-1", "python3", "worker", 0.99, 1.0)
    slow = judge.verdict([ok], [0.3], threads=[calm, busy_worker], datapath="user")
    assert slow["verdict"] == "unfaithful" and "decode-1" in slow["reasons"][0]
