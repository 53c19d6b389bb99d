"""The example scripts run as documented (the ones that need root: tests/emulation/
test_emulate.py), and the example plugin package is a package of its own."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from testbed import api
from tests.conftest import P2C_PACKAGE, ROOT


def run_example(name: str, *args) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "examples" / name), *map(str, args)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_simulate_example_prints_ttft_and_tiers_per_scheduler(tmp_path):
    shown = run_example("simulate.py", "scenarios/default.yaml", tmp_path)
    for name in ("rr", "cla", "netkv-full", "NetKV-Full", "ttft_mean_ms", "records: "):
        assert name in shown
    (folder,) = tmp_path.glob("default-flowsim-*")
    run = api.open_run(folder)
    assert set(run.requests["scheduler"]) == {"rr", "cla", "netkv-full"}
    # one naming in every frame: the key, and the table's name beside it
    assert set(run.rows["scheduler"]) == set(run.requests["scheduler"])
    assert dict(zip(run.rows["scheduler"], run.rows["name"], strict=True))["cla"] == "CLA*"
    # the measured frame is what the table averaged (one seed: the same mean)
    got = run.measured.groupby("scheduler")["ttft"].mean() * 1e3
    for _, row in run.rows.iterrows():
        assert got[row["scheduler"]] == pytest.approx(row["ttft_mean_ms"], rel=1e-9)
    assert len(run.measured) < len(run.requests)  # the warm-up is left out


def test_the_sweep_example_runs_on_every_core_and_pivots_the_gain(tmp_path):
    shown = run_example("sweep.py", "scenarios/default.yaml", tmp_path)
    head = shown.splitlines()[0].split()
    assert head == ["scheduler", "cla", "netkv-full", "gain", "%"]
    loads = [line.split()[0] for line in shown.splitlines()[2:]]
    assert loads == ["0.6", "1.0"]
    (folder,) = tmp_path.glob("default-flowsim-*")
    assert len(api.open_run(folder).cells) == 4  # 2 loads x 2 schedulers


def test_the_plugin_package_declares_its_entry_point_and_installs(plugin_path):
    meta = tomllib.loads((P2C_PACKAGE / "pyproject.toml").read_text())
    points = meta["project"]["entry-points"]["netkv_testbed.schedulers"]
    assert points == {"p2c": "p2c_plugin:PowerOfTwo"}
    target = plugin_path.split(":")[0]
    (dist,) = Path(target).glob("p2c_plugin-*.dist-info")
    assert "netkv_testbed.schedulers" in (dist / "entry_points.txt").read_text()


def test_the_plugin_script_is_twenty_lines_or_so():
    code = [line for line in (ROOT / "examples" / "plugin_both_engines.py").read_text()
            .splitlines() if line.strip()]
    assert len(code) <= 22


def test_the_network_model_example_judges_its_model_beside_max_min(tmp_path):
    import json
    import os

    from testbed.scenario import Scenario
    from testbed.validate.pipelines.judge_folder import judge_again
    from tests.conftest import TRACE, flow_validation

    base = Scenario(name="nm", workload={"trace": str(TRACE), "measure_s": 3.0},
                    schedulers=["rr", "netkv-full"], network={"ecmp": "per-pair"})
    folder = flow_validation(tmp_path / "nm-validate-x", base)  # a flow run for packets
    judge_again(folder)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "examples")}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "network_model.py"),
                           str(folder)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert any(line.startswith("per-stream ") for line in done.stdout.splitlines())
    rows = json.loads((folder / "comparison.json").read_text())["flow_models"]["models"]
    assert [r["model"] for r in rows] == ["max-min", "network_model:PerStream",
                                          "fixed-bandwidth"]
    assert rows[1]["faults"] == 0  # it ran behind the guard without a fault
