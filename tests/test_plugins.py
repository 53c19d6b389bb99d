"""Scheduler plugins: found by entry point or 'module:Class', run unchanged by the flow
simulator, and guarded: a plugin that raises, answers nonsense or hangs is reported by
name with the request, and the run still decides every request once."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testbed import api
from testbed.model.extensions import plugins
from testbed.model.extensions.guard import GuardedScheduler
from testbed.model.oracle import Oracle
from testbed.model.schedulers import Candidate, RequestInfo, SchedulerContext
from testbed.model.timing import TimingModel
from testbed.workloads.build import build_workload
from tests.conftest import ROOT, TRACE

SMALL = {"workload.warmup_s": 2, "workload.measure_s": 6, "seeds": 1,
         "scheduler_timeout_ms": 50}


def small(schedulers):
    return api.load_scenario(ROOT / "scenarios" / "default.yaml", SMALL, schedulers=schedulers)


def run_cli(*args, env_path: str, cwd=ROOT):
    import os

    env = {**os.environ, "PYTHONPATH": env_path}
    return subprocess.run([sys.executable, "-m", "testbed", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_example_package_registers_p2c_by_entry_point(with_plugins):
    assert plugins.entry_points()["p2c"] == "p2c_plugin:PowerOfTwo"
    by_entry, by_name = plugins.resolve("p2c"), plugins.resolve("p2c_plugin:PowerOfTwo")
    assert by_entry.cls is by_name.cls and by_entry.name == "P2C"
    assert by_entry.origin.startswith("entry point p2c")
    assert plugins.available()["p2c"] == "entry point -> p2c_plugin:PowerOfTwo"


def test_simulate_accepts_a_builtin_and_a_plugin_by_module_and_class(with_plugins, tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"""
name: plug
seeds: 1
schedulers: [netkv-full, "p2c_plugin:PowerOfTwo"]
workload: {{trace: {TRACE}, profile: rag, warmup_s: 2, measure_s: 6}}
""")
    done = run_cli("simulate", str(scenario), "--out", str(tmp_path / "out"),
                   env_path=with_plugins)
    assert done.returncode == 0, done.stderr
    assert "| NetKV-Full |" in done.stdout and "| P2C |" in done.stdout
    run = api.open_run(next((tmp_path / "out").glob("plug-flowsim-*")))
    assert set(run.requests["scheduler"]) == {"netkv-full", "p2c_plugin:PowerOfTwo"}
    assert run.fault_count() == 0 and run.scheduler_faults.empty
    listed = run_cli("schedulers", env_path=with_plugins)
    assert "p2c_plugin:PowerOfTwo" in listed.stdout and "P2C" in listed.stdout


def test_p2c_samples_two_and_is_reproducible_and_differs_from_netkv(with_plugins, tmp_path):
    sc = small(["netkv-full", "p2c"])
    first = api.simulate(sc, tmp_path / "a")
    again = api.simulate(sc, tmp_path / "b")
    a, b = first.requests, again.requests
    p2c = a[a.scheduler == "p2c"]
    assert list(p2c["decode"]) == list(b[b.scheduler == "p2c"]["decode"])  # seeded draws
    netkv = a[a.scheduler == "netkv-full"]
    assert list(p2c["decode"]) != list(netkv["decode"])  # it is not NetKV under a new name
    expected = len(build_workload(sc, sc.seed).requests)
    assert len(p2c) == expected and p2c["state"].notna().all()


@pytest.mark.parametrize("key, kind, some", [
    ("faulty_plugins:RaisesSometimes", "raised", True),
    ("faulty_plugins:UnknownInstance", "unknown_instance", False),
    ("faulty_plugins:BadReturn", "bad_return", False),
    ("faulty_plugins:NeverReturns", "too_slow", True),
    ("faulty_plugins:SwallowsEverything", "too_slow", False),
])
def test_a_failing_plugin_is_reported_per_request_and_loses_nothing(with_plugins, tmp_path,
                                                                    key, kind, some):
    sc = small([key])
    run = api.simulate(sc, tmp_path)
    expected = {r.request_id for r in build_workload(sc, sc.seed).requests}
    df = run.requests
    assert set(df["id"]) == expected and len(df) == len(expected)  # none lost, none twice
    assert df["state"].isin(["completed", "rejected"]).all()
    faults = run.scheduler_faults
    assert len(faults) > 0
    if some:  # the plugin's own decisions stand where it did not fail
        assert 0 < len(faults) < len(df)
    else:
        assert len(faults) == len(df.dropna(subset=["decode"]))
    for _, row in faults.iterrows():  # by name, with the request, and who placed it
        assert row["scheduler_fault"].startswith(f"{key} {kind} on {row['id']}:")
        assert row["scheduler_fault"].endswith("placed by LA")
    (cell,) = run.summary["rows"]
    assert cell["scheduler_faults"][kind] == len(faults)
    assert cell["scheduler_faults"]["total"] == len(faults)


def test_the_cli_names_the_failing_plugin_and_request(with_plugins, tmp_path):
    done = run_cli("simulate", str(ROOT / "scenarios" / "default.yaml"), "--seeds", "1",
                   "--set", "workload.measure_s=6", "--set",
                   "schedulers=[faulty_plugins:RaisesSometimes]", "--out", str(tmp_path),
                   env_path=with_plugins)
    assert done.returncode == 0, done.stderr
    assert "scheduler faulty_plugins:RaisesSometimes" in done.stderr
    assert "raised on " in done.stderr and "ZeroDivisionError: no luck with" in done.stderr


def test_in_flight_counts_are_restored_when_a_decision_is_thrown_away(with_plugins):
    from faulty_plugins import CallbackRaises, RaisesSometimes

    ctx = SchedulerContext(TimingModel())
    oracle = Oracle({("p0", "d0"): 1, ("p0", "d1"): 2}, {1: 400.0, 2: 200.0},
                    {1: 2.0, 2: 5.0})
    cands = [Candidate("d0", 1e12, 0, 0, 0), Candidate("d1", 1e12, 0, 0, 0)]
    guard = GuardedScheduler("r", RaisesSometimes(ctx), timeout_s=1.0)
    unlucky = next(f"r{i}" for i in range(100) if sum(map(ord, f"r{i}")) % 3 == 0)
    decision = guard.select(RequestInfo(unlucky, 1000, 1e9), "p0", cands, oracle)
    assert decision.decode in ("d0", "d1") and "raised" in decision.fault
    # the plugin's stray increment on tier 0 is gone; the fallback's one count is there
    assert guard.inner.inflight.raw(0, "p0") == 0
    assert guard.inner.inflight.raw(decision.tier, "p0") == 1
    guard.transfer_done("p0", decision.tier)
    assert guard.inner.inflight.raw(decision.tier, "p0") == 0

    broken = GuardedScheduler("c", CallbackRaises(ctx), timeout_s=1.0)
    d = broken.select(RequestInfo("x", 1000, 1e9), "p0", cands, oracle)
    broken.transfer_done("p0", d.tier)  # raises inside: recorded, count released
    assert broken.inner.inflight.raw(d.tier, "p0") == 0
    assert broken.report()["callback_raised"] == 1


@pytest.mark.parametrize("key, words", [
    ("no_such_module:Thing", "no module named 'no_such_module' on the Python path"),
    ("faulty_plugins:Nope", "module faulty_plugins has no 'Nope'"),
    ("faulty_plugins:NotAScheduler", "is not a scheduler class"),
    ("json:dumps", "is not a scheduler class"),
    ("not a key", "unknown scheduler 'not a key'"),
    ("bad:1x", "expected 'module:Class'"),
])
def test_a_bad_plugin_key_is_refused_when_the_scenario_loads(with_plugins, key, words):
    with pytest.raises(ValueError) as err:
        small([key])
    assert words in str(err.value) and "schedulers" in str(err.value)


def test_a_plugin_whose_constructor_fails_stops_the_run_before_it_starts(with_plugins,
                                                                         tmp_path):
    done = run_cli("simulate", str(ROOT / "scenarios" / "default.yaml"), "--seeds", "1",
                   "--set", "schedulers=[faulty_plugins:BrokenConstructor]", "--out",
                   str(tmp_path), env_path=with_plugins)
    assert done.returncode == 2, done.stderr
    assert "faulty_plugins:BrokenConstructor" in done.stderr
    assert "OSError: cannot open my model weights" in done.stderr
    assert not list(tmp_path.glob("*"))  # nothing half-started


def test_a_plugin_runs_in_worker_processes_too(with_plugins, tmp_path):
    run = api.simulate(small(["p2c", "faulty_plugins:RaisesSometimes"]), tmp_path, jobs=2)
    assert set(run.requests["scheduler"]) == {"p2c", "faulty_plugins:RaisesSometimes"}
    assert run.fault_count() > 0
