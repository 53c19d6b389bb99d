"""Another simulator's predictions judged against a run: the workload exported with its
schema, predictions judged with validate's statistics, bad files refused by line and
field with nothing written."""

import csv
import json
import math
import subprocess
import sys

import pytest
from click.testing import CliRunner

from testbed.api import load_scenario, simulate
from testbed.cli import main
from testbed.validate.report.exported import WorkloadFile, schema
from tests.conftest import ROOT

SCHEMA = ROOT / "docs" / "schemas" / "workload.schema.json"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    sc = load_scenario(ROOT / "scenarios" / "validate.yaml",
                       {"workload.warmup_s": 1, "workload.measure_s": 4, "seeds": 2})
    return simulate(sc, tmp_path_factory.mktemp("run")).folder


def own(run) -> list[dict]:
    """The run's own TTFTs and whole-transfer times, as a perfect predictor gives them."""
    rows = []
    for cell in sorted((run / "cells").glob("*/*/seed*")):
        key = cell.relative_to(run / "cells").as_posix()
        with (cell / "requests.csv").open() as f:
            for r in csv.DictReader(f):
                if r["measured"] == "True" and r["ttft"]:
                    took = (float(r["transfer_end"]) - float(r["transfer_start"])
                            if r["transfer_end"] else "")
                    rows.append({"cell": key, "request": r["id"], "ttft_s": float(r["ttft"]),
                                 "transfer_s": took if took and took > 0 else ""})
    return rows


def write(path, rows, fields=("cell", "request", "ttft_s", "transfer_s")):
    with path.open("w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(fields), extrasaction="ignore")
        out.writeheader()
        out.writerows(rows)
    return path


def judge(run, path):
    return CliRunner().invoke(main, ["judge", "--predictions", str(path), str(run)])


def test_the_workload_file_holds_the_work_served_and_its_schema_is_current(run, tmp_path):
    done = CliRunner().invoke(main, ["export-workload", str(run), "--out",
                                     str(tmp_path / "w.json")])
    assert done.exit_code == 0, done.output
    doc = WorkloadFile.model_validate_json((tmp_path / "w.json").read_text())
    assert len(doc.cells) == 6 and {c.scheduler for c in doc.cells} == {"rr", "cla",
                                                                         "netkv-full"}
    assert len(doc.fabric.instances) == 16 and doc.bytes_per_token > 0
    with (run / "cells" / doc.cells[0].cell / "requests.csv").open() as f:
        assert [r.id for r in doc.cells[0].requests] == [r["id"] for r in csv.DictReader(f)]
    assert all(t.bytes > 0 for c in doc.cells for t in c.transfers)
    assert json.loads(SCHEMA.read_text()) == schema(), (
        "docs/schemas/workload.schema.json is stale: python -m testbed.validate.report.exported > "
        "docs/schemas/workload.schema.json")


def test_a_perfect_prediction_agrees_and_a_biased_one_is_caught(run, tmp_path):
    done = judge(run, write(tmp_path / "same.csv", own(run)))
    assert done.exit_code == 0, done.output
    doc = json.loads((run / "predictions-same" / "judged.json").read_text())
    assert all(v["verdict"] == "agree" and abs(v["point"]) < 1e-9
               for by in doc["ttft_verdicts"].values() for v in by.values())
    # requests.csv keeps the transfer's ends to the microsecond: equal to that
    assert doc["transfers"]["n"] > 0 and doc["transfers"]["p90_abs_error"] < 1e-3
    assert done.output.startswith("Predictions (same.csv) vs packets, 6 cell(s)")
    slow = [{**r, "ttft_s": 1.5 * r["ttft_s"]} for r in own(run)]  # 50% slower everywhere
    done = judge(run, write(tmp_path / "slow.csv", slow))
    assert done.exit_code == 0, done.output
    doc = json.loads((run / "predictions-slow" / "judged.json").read_text())
    assert all(v["verdict"] == "disagree" and v["point"] == pytest.approx(0.5)
               for by in doc["ttft_verdicts"].values() for v in by.values())


def test_the_example_external_model_is_judged_end_to_end(run, tmp_path):
    workload, out = tmp_path / "workload.json", tmp_path / "external.csv"
    assert CliRunner().invoke(main, ["export-workload", str(run), "--out",
                                     str(workload)]).exit_code == 0
    subprocess.run([sys.executable, str(ROOT / "examples" / "external_model.py"),
                    str(workload), str(out)], check=True, capture_output=True)
    done = judge(run, out)
    assert done.exit_code == 0, done.output
    doc = json.loads((run / "predictions-external" / "judged.json").read_text())
    assert doc["transfers"]["n"] > 0
    assert all(math.isfinite(v["point"]) for by in doc["ttft_verdicts"].values()
               for v in by.values())


@pytest.mark.parametrize("change, line, words", [
    (lambda rows: rows[1:], None, "have no ttft_s (first: "),  # a measured request missing
    (lambda rows: [{**rows[0], "request": "nope"}] + rows[1:], 2, "request 'nope' is not in"),
    (lambda rows: [{**rows[0], "cell": "000-base/xx/seed1"}] + rows[1:], 2, "is not a cell"),
    (lambda rows: [{**rows[0], "ttft_s": -1}] + rows[1:], 2, "ttft_s -1 must be at least 0"),
    (lambda rows: [{**rows[0], "ttft_s": "nan"}] + rows[1:], 2, "ttft_s 'nan' is not finite"),
    (lambda rows: [{**rows[0], "ttft_s": "soon"}] + rows[1:], 2, "is not a number"),
    (lambda rows: [rows[0], rows[0]] + rows[1:], 3, "predicted twice"),
    (lambda rows: [{**r, "ttft_s": 1000 * r["ttft_s"]} for r in rows], None, "milliseconds?"),
])
def test_bad_predictions_are_named_by_line_and_field_and_nothing_is_written(
        run, tmp_path, change, line, words):
    path = write(tmp_path / "bad.csv", change(own(run)))
    done = judge(run, path)
    assert done.exit_code == 2, done.output
    assert words in done.output
    if line:
        assert f"bad.csv:{line}:" in done.output
    assert not (run / "predictions-bad").exists()


def test_a_column_in_other_units_is_refused(run, tmp_path):
    path = write(tmp_path / "ms.csv", [{**r, "ttft_ms": 1} for r in own(run)],
                 fields=("cell", "request", "ttft_ms"))
    done = judge(run, path)
    assert done.exit_code == 2 and "ms.csv:1: unknown column 'ttft_ms'" in done.output
    assert "seconds" in done.output
