"""Sweeps on several processes and on Dask give the serial run's folder and table."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from testbed.records import PARTIAL
from testbed.runner import run_simulated, run_task
from testbed.scenario import load_scenario
from testbed.sweep import Executor
from tests.conftest import ROOT

SWEEP = """
name: sweep8
workload: {trace: TRACE, profile: chatbot, warmup_s: 1, measure_s: 2}
schedulers: [rr, netkv-full]
seeds: 2
sweep:
  workload.load: [0.5, 1.0]
"""  # 2 loads x 2 schedulers x 2 seeds = 8 cells

TIMED = {"decision_us_median"}  # wall-clock figures differ between any two runs


def comparable(folder: Path) -> dict:
    out = {}
    for path in sorted(folder.glob("cells/*/*/seed*/summary.json")):
        summary = json.loads(path.read_text())
        out[str(path.relative_to(folder))] = {k: v for k, v in summary.items() if k not in TIMED}
        for name in ("requests.csv", "transfers.csv", "links.csv"):
            out[str(path.parent.relative_to(folder) / name)] = (path.parent / name).read_text()
    return out


@pytest.mark.slow
def test_local_processes_and_dask_match_the_serial_sweep(write_scenario, tmp_path):
    sc = load_scenario(write_scenario(SWEEP))
    serial = run_simulated(sc, tmp_path / "serial")
    local = run_simulated(sc, tmp_path / "local", executor=Executor.local(2))
    dask = run_simulated(sc, tmp_path / "dask", executor=Executor.dask("local:2"))
    reference = comparable(serial.folder)
    assert len([k for k in reference if k.endswith("summary.json")]) == 8
    assert comparable(local.folder) == reference
    assert comparable(dask.folder) == reference
    strip = [line for line in serial.table.splitlines() if "|" in line]
    assert [line for line in dask.table.splitlines() if "|" in line] == strip
    assert not dask.lost and not (dask.folder / PARTIAL).exists()


def flaky(task):
    """Kills its worker process the first time it runs cell 0; fails cell 1 for ever."""
    marker = Path(os.environ["NETKV_TEST_MARKER"])
    if task.index == 0 and task.scheduler == "rr" and task.seed == 1 and not marker.exists():
        marker.write_text("died once")
        os._exit(3)
    if task.index == 1 and task.scheduler == "rr" and task.seed == 1:
        raise RuntimeError("this cell always fails")
    return run_task(task)


@pytest.mark.slow
@pytest.mark.parametrize("executor", [Executor.local(2), Executor.dask("local:2")],
                         ids=["local", "dask"])
def test_a_dead_worker_is_retried_and_a_failing_cell_is_reported_lost(
        write_scenario, tmp_path, monkeypatch, executor):
    monkeypatch.setenv("NETKV_TEST_MARKER", str(tmp_path / "marker"))
    import testbed.runner as runner

    monkeypatch.setattr(runner, "run_task", flaky)
    sc = load_scenario(write_scenario(SWEEP))
    outcome = run_simulated(sc, tmp_path / "out", executor=executor)
    assert (tmp_path / "marker").exists()  # the worker really died once ...
    assert (outcome.folder / "cells/000-load-0.5/rr/seed1/summary.json").exists()
    assert [x["cell"] for x in outcome.lost] == ["cells/001-load-1.0/rr/seed1"]
    assert "always fails" in outcome.lost[0]["error"]
    assert "Lost cells" in outcome.table and (outcome.folder / PARTIAL).exists()
    assert len(list(outcome.folder.glob("cells/*/*/seed*/summary.json"))) == 7


def pid(_task) -> int:
    return os.getpid()


def test_a_kept_pool_serves_one_map_after_another_on_the_same_processes():
    """Several scenarios in a row (`testbed simulate A B ...`) start their workers once."""
    with Executor.local(2) as executor:
        first = {r for _, r in executor.map(pid, list(range(8)))}
        second = {r for _, r in executor.map(pid, list(range(8)))}
    assert len(first | second) <= 2, (first, second)
    assert os.getpid() not in first | second
    assert executor._pool is None  # closed on the way out
    alone = Executor.local(2)  # without `with`, each map has a pool of its own
    once = {r for _, r in alone.map(pid, list(range(8)))}
    assert once.isdisjoint(first | second) and alone._pool is None


def test_a_long_sweep_value_gets_a_short_folder_name_of_its_own(tmp_path):
    """A point whose value would make a name past the filesystem's 255 characters (a
    description sweep here) keeps its start and a hash: two such points do not meet."""
    from testbed.cells import SLUG_MAX, slug

    long_a, long_b = "x" * 400 + "a", "x" * 400 + "b"
    a, b = slug({"description": long_a}), slug({"description": long_b})
    assert len(a) == len(b) == SLUG_MAX and a != b and a.startswith("description-xxx")
    assert slug({"workload.load": 2.0}) == "load-2.0"  # short ones as before
    sc = load_scenario(ROOT / "scenarios" / "default.yaml",
                       {"seeds": 1, "schedulers": ["rr"], "workload.measure_s": 2,
                        "workload.warmup_s": 1, "sweep": {"description": [long_a, long_b]}})
    out = run_simulated(sc, tmp_path)
    assert not out.lost and len(list(out.folder.glob("cells/*/rr/seed1/requests.csv"))) == 2
