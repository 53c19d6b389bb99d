"""`validate --packets ns3`: the flow model judged against ns-3's packets, calibrated on
ns-3's own probes, without root."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from testbed.api import validate
from testbed.cli import main
from testbed.scenario import load_scenario
from testbed.validate.judging.words import runs_of
from tests.conftest import ROOT


def test_a_validation_on_ns3_calibrates_on_its_probes_and_judges_the_claims(tmp_path):
    sc = load_scenario(ROOT / "scenarios" / "validate.yaml",
                       {"workload.warmup_s": 1, "workload.measure_s": 4, "seeds": 2})
    result = validate(sc, tmp_path, packets="ns3", jobs=2)
    doc = result.comparison
    assert doc["targets"]["packets"] == "ns3" and doc["targets"]["runs"] == 6
    cal = json.loads((result.folder / "calibration.json").read_text())
    assert set(cal["capacity_factor"]) == {"1", "2", "3"} and cal["time_dilation"] == 1.0
    assert all(0.5 < f < 1.2 for f in cal["capacity_factor"].values()), cal["capacity_factor"]
    assert result.claims["verdict"].notna().all() and len(result.claims) > 0
    lines = result.summary_lines()
    assert any("6 ns-3 runs" in line for line in lines), lines
    assert not any("emulated runs" in line for line in lines)
    answer = result.answer_lines()  # what the terminal shows, the report's path after it
    assert answer[0].startswith("Claims on packets: ") and len(answer) + 1 <= 8, answer
    assert answer[-1].startswith("Packets: 6 ns-3 runs") and max(map(len, answer)) <= 100
    report = (result.folder / "report.md").read_text()
    assert report.index("## The answer") < report.index("## Summary")
    assert "plots/verdicts.png" in report and (result.folder / "plots/verdicts.png").exists()
    assert result.emulation.engine == "ns3" and (result.folder / "report.md").exists()
    from testbed.validate.engines import machine_cache  # the planner's rate, measured here

    assert machine_cache.measured_here()["ns3_packets_per_cpu_s"] > 0


def test_the_emulations_sequential_plan_is_refused_on_ns3_by_name(tmp_path):
    sc = load_scenario(ROOT / "scenarios" / "validate.yaml")
    with pytest.raises(ValueError, match="target_ci"):
        validate(sc, tmp_path, packets="ns3", target_ci=0.05)
    done = subprocess.run([sys.executable, "-m", "testbed", "validate",
                           "scenarios/validate.yaml", "--packets", "ns3", "--target-ci", "4%",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and "target_ci" in done.stderr, done.stderr


def test_repeats_on_ns3_perturb_the_first_seeds_and_measure_the_floor(tmp_path):
    sc = load_scenario(ROOT / "scenarios" / "validate.yaml",
                       {"workload.warmup_s": 1, "workload.measure_s": 4, "seeds": 2,
                        "schedulers": ["rr", "netkv-full"]})
    result = validate(sc, tmp_path, packets="ns3", jobs=2, repeats=2)
    again = sorted((result.folder / "repeats").glob("*-ns3-*"))
    assert len(again) == 2  # each its own perturbed run of both seeds, every scheduler
    for k, run in enumerate(again, start=1):
        ran = load_scenario(run / "scenario.yaml")
        assert ran.schedulers == ["rr", "netkv-full"] and ran.seeds == 2
        assert ran.ns3.jitter_seed == k
        assert ran.ns3.start_jitter_us == pytest.approx(8 * 1514 / 20e6 * 1e6)  # 20 Mbit/s
        assert ran.workload.seed_segments  # the judged seeds' own segments
    floor = result.comparison["repeat"]
    assert floor["runs"] == 3
    assert {"000-base/rr/seed1", "000-base/rr/seed2"} <= set(floor["cells"])
    assert floor["n"] > 0 and floor["median_abs_error"] > 0  # perturbed: no exact repeat
    engines = floor["engines"]  # packets deciding again: the both-engines figure's floor
    assert engines["schedulers"] == ["netkv-full", "rr"] and engines["n"] > 0
    t = result.comparison["targets"]
    assert t["packets_runs"] == 3 and t["packets_cells"] == len(floor["cells"])
    assert t["packets_engines_median_abs_transfer_error"] == engines["median_abs_error"]
    report = (result.folder / "report.md").read_text()
    assert runs_of(t) in report and "packets deciding again" in report
    # `testbed repeat` reads the same runs: ns-3's own first, then the perturbed ones
    got = CliRunner().invoke(main, ["repeat", str(result.folder), "--scheduler", "rr",
                                    "--scheduler", "netkv-full"])
    assert got.exit_code == 0, got.output
    text = " ".join(got.output.split())
    assert text.startswith("3 packet runs") and "packets deciding again (netkv-full, rr;" in text
    assert f"median |error| {100 * engines['median_abs_error']:.1f}%" in text


def test_a_first_round_past_the_budget_is_refused_before_anything_starts(tmp_path):
    from testbed.validate.engines.ns3_cost import PlanRefused

    sc = load_scenario(ROOT / "scenarios" / "validate.yaml", {"ns3.scale": 1e-2})
    with pytest.raises(PlanRefused, match=r"ns3\.scale <= [0-9.e-]+, or workload\.measure_s"):
        validate(sc, tmp_path, packets="ns3", jobs=2, budget_s=60.0)
    assert not list(tmp_path.iterdir())  # nothing half-started
    done = subprocess.run([sys.executable, "-m", "testbed", "validate",
                           "scenarios/validate.yaml", "--packets", "ns3", "--budget", "1m",
                           "--set", "ns3.scale=1e-2", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "first round would not fit" in done.stderr, done.stderr
    assert not list(tmp_path.iterdir())


def test_the_cost_estimate_counts_what_the_engine_puts_on_wires():
    """The estimate's count (segments and delayed ACKs, per link, none lost) against the
    packets one ns-3 run really put on wires: below them (loss recovery is in the rate),
    and not by more than half (a path's links or a shard's segments miscounted would be)."""
    from testbed.cells import Task
    from testbed.runner import run_task
    from testbed.validate.engines.ns3_cost import shard_packets, wire_mss
    from testbed.validate.pipelines.ns3_pipeline import for_ns3

    sc = for_ns3(load_scenario(ROOT / "scenarios" / "validate.yaml",
                               {"workload.warmup_s": 1, "workload.measure_s": 3}))
    point, cell = sc.points()[0]
    out = run_task(Task(0, point, cell, "netkv-full", cell.seed, engine="ns3"))
    counts = out["files"]["ns3.json"]["packets"]
    estimate = shard_packets(out["transfers"], cell.emulation.scale, wire_mss(cell))
    assert 0.5 < estimate / (counts["hosts"] + counts["hops"]) < 1.0
