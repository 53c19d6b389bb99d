"""Property: whatever a user hands the commands over finished folders (damaged records, a
predictions file, a document) and whatever they give validate's options, the command ends
with exit 0, or exit 2 and one line naming what is wrong, within a time bound, and a
refusal leaves every folder given exactly as it was. Damage is drawn by kind (a file cut
short, of another JSON shape, not text, a column gone, a number no float holds or not
finite, a field past the csv module's limit, a folder emptied), not by example."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.cli import main
from testbed.scenario import load_scenario
from tests.conftest import ROOT, TRACE, flow_validation

HEAD = f"""name: x
workload: {{trace: {TRACE}, warmup_s: 1, measure_s: 3}}
cluster: {{pods: 1, racks_per_pod: 2, servers_per_rack: 1}}
seeds: 1
schedulers: [rr, cla]
"""
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
BOUND_S = 30  # a hang guard, not a speed target


def tree(folder: Path) -> dict[str, str]:
    """Every file under `folder`, by content."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def invoke(args: list[str]):
    t0 = time.perf_counter()
    result = CliRunner().invoke(main, args, catch_exceptions=True)
    elapsed = time.perf_counter() - t0
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        f"{result.exception!r} on {args}"
    assert result.exit_code in (0, 2), f"exit {result.exit_code} on {args}:\n{result.output}"
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert elapsed < BOUND_S, f"{elapsed:.1f} s on {args}"
    return result


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished flow run and a validation around one: what the folder commands read."""
    from testbed.runner import run_simulated

    root = tmp_path_factory.mktemp("finished")
    (root / "s.yaml").write_text(HEAD)
    scenario = load_scenario(root / "s.yaml")
    run_simulated(scenario, root / "runs").folder.rename(root / "run")
    flow_validation(root / "validation", scenario)
    judged = CliRunner().invoke(main, ["judge", str(root / "validation")])  # its documents
    assert judged.exit_code == 0, judged.output
    assert (root / "validation" / "comparison.json").exists()
    return root


def _records(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()
                  and p.suffix in (".json", ".csv", ".yaml"))


DAMAGE = st.sampled_from([
    "cut", "empty", "list", "number", "binary", "drop-column", "inf", "nan", "huge-int",
    "huge-field", "short-row", "not-a-dict-field", "emptied-folder",
])


def damage(path: Path, kind: str, pick: int) -> None:
    """One kind of damage to one record file (or, for emptied-folder, its cell folder)."""
    text = path.read_text(encoding="utf-8")
    if kind == "cut":
        path.write_text(text[: len(text) // 2])
    elif kind == "empty":
        path.write_text("")
    elif kind == "list":
        path.write_text("[1, 2]\n" if path.suffix == ".json" else "- 1\n- 2\n")
    elif kind == "number":
        path.write_text("3\n")
    elif kind == "binary":
        path.write_bytes(b"\xff\xfe\x00\x81" * 64)
    elif kind == "emptied-folder":
        for p in path.parent.iterdir():
            if p.is_file():
                p.unlink()
    elif path.suffix == ".csv":
        lines = text.splitlines()
        if len(lines) < 2:
            path.write_text(text + "\n" + "x" * 200_000)
            return
        row = lines[1 + pick % (len(lines) - 1)].split(",")
        col = pick % len(row)
        if kind == "drop-column":
            lines = [",".join(c for i, c in enumerate(line.split(",")) if i != col)
                     for line in lines[:1]] + lines[1:]
        elif kind == "short-row":
            row = row[:-1]
        else:
            row[col] = {"inf": "inf", "nan": "nan", "huge-int": "9" * 400,
                        "huge-field": "y" * 200_000, "not-a-dict-field": "[]"}[kind]
        if kind != "drop-column":
            lines[1 + pick % (len(lines) - 1)] = ",".join(row)
        path.write_text("\n".join(lines) + "\n")
    elif path.suffix == ".json":
        doc = json.loads(text)
        if not isinstance(doc, dict) or not doc:
            path.write_text("Infinity")
            return
        key = sorted(doc)[pick % len(doc)]
        doc[key] = {"inf": math.inf, "nan": math.nan, "huge-int": 10**400,
                    "huge-field": "z" * 200_000, "short-row": None, "drop-column": None,
                    "not-a-dict-field": [1, [2]]}[kind]
        if kind == "drop-column":
            del doc[key]
        path.write_text(json.dumps(doc, allow_nan=True))
    else:  # yaml
        path.write_text(text + "\nworkload: {load: .nan}\n" if kind == "nan" else
                        "name: [\n")


@SETTINGS
@given(kind=DAMAGE, which=st.integers(0, 10**6), pick=st.integers(0, 10**6),
       command=st.sampled_from(["export-workload", "compare", "predictions", "repeat",
                                "replay"]))
def test_damaged_run_records_are_refused_by_name_and_left_as_they_are(
        tmp_path, finished, kind, which, pick, command):
    run = tmp_path / "run"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(finished / "run", run)
    files = _records(run)
    target = files[which % len(files)]
    damage(target, kind, pick)
    before = tree(run)
    if command == "export-workload":
        result = invoke(["export-workload", str(run), "--out", str(tmp_path / "w.json")])
    elif command == "compare":
        result = invoke(["compare", str(finished / "run"), str(run), "--out",
                         str(tmp_path / "cmp")])
    elif command in ("repeat", "replay"):
        result = invoke([command, str(finished / "run"), str(run)]
                        + (["--out", str(tmp_path / "replays")] if command == "replay" else []))
    else:
        predictions = tmp_path / "p.csv"
        predictions.write_text("cell,request,ttft_s\n")
        result = invoke(["judge", str(run), "--predictions", str(predictions)])
    if result.exit_code == 2:
        assert tree(run) == before, "a refusal changed the folder"
        said = " ".join(result.output.split())  # the console wraps long paths
        assert any(name in said for name in (str(run), str(finished / "run"), target.name,
                                             "p.csv")), result.output


PREDICTION_VALUES = st.one_of(
    st.sampled_from(["0.5", "1", "0", "-1", "nan", "inf", "-inf", "1e400", "9" * 400, "",
                     "abc", "1,5", "0x10", " 2 ", "1e-300", "true"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr), st.text(max_size=8))


@SETTINGS
@given(header=st.lists(st.sampled_from(["cell", "request", "ttft_s", "transfer_s",
                                        "ttft_ms", "extra", ""]), min_size=0, max_size=5),
       rows=st.lists(st.tuples(st.integers(0, 50), PREDICTION_VALUES, PREDICTION_VALUES),
                     max_size=8),
       crlf=st.booleans())
def test_any_predictions_file_is_judged_or_refused_naming_its_line(tmp_path, finished,
                                                                     header, rows, crlf):
    run = finished / "run"
    cells = sorted(p.relative_to(run / "cells").as_posix()
                   for p in run.glob("cells/*/*/seed*"))
    lines = [",".join(header)]
    for i, ttft, transfer in rows:
        cell = cells[i % len(cells)]
        values = {"cell": cell, "request": str(i), "ttft_s": ttft, "transfer_s": transfer,
                  "ttft_ms": ttft, "extra": "x", "": ""}
        lines.append(",".join(values[h] for h in header))
    path = tmp_path / "p.csv"
    path.write_text(("\r\n" if crlf else "\n").join(lines) + "\n")
    before = tree(run)
    result = invoke(["judge", str(run), "--predictions", str(path)])
    if result.exit_code == 2:
        assert "p.csv" in result.output, result.output
        assert tree(run) == before
    shutil.rmtree(run / "predictions-p", ignore_errors=True)


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(kind=DAMAGE, which=st.integers(0, 10**6), pick=st.integers(0, 10**6))
def test_judge_on_a_damaged_validation_refuses_by_name_and_rewrites_nothing(
        tmp_path, finished, kind, which, pick):
    folder = tmp_path / "validation"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(finished / "validation", folder)
    files = [p for p in _records(folder) if "cells" not in p.parts or p.name == "summary.json"]
    target = files[which % len(files)]
    damage(target, kind, pick)
    before = tree(folder)
    result = invoke(["judge", str(folder)])
    if result.exit_code == 2:
        assert tree(folder) == before, f"judge changed {target} on refusing: {result.output}"
        assert str(folder) in result.output or target.name in result.output, result.output
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".validation")]
    assert not leftovers


OPTION_VALUES = st.sampled_from(["nan", "inf", "-1", "0", "1", "2.5", "1e12", "10**3", "",
                                 "abc", "100", "101", "30m", "1.5h", "9999999h", "1e-9",
                                 "-0", "4%", "0.04"])
OPTIONS = {  # option: whether a value is within its bounds (the oracle)
    "--budget": lambda v: _duration(v) is not None,
    "--emulation-budget": lambda v: _duration(v) is not None,
    "--repeats": lambda v: v.isdigit() and int(v) <= 100,
    "--calibration-max-age": lambda v: _finite(v) is not None and 0 <= _finite(v) <= 1e6,
    "--target-ci": lambda v: (x := _finite(v.rstrip("%"))) is not None and
    0 < x / (100 if v.endswith("%") else 1) < 1,
}


def _finite(text: str) -> float | None:
    try:
        x = float(text)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _duration(text: str) -> float | None:
    unit = {"s": 1, "m": 60, "h": 3600}.get(text[-1:].lower())
    x = _finite(text[:-1] if unit else text)
    x = None if x is None else x * (unit or 1)
    return x if x is not None and 0 < x <= 30 * 86400 else None


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chosen=st.dictionaries(st.sampled_from(sorted(OPTIONS)), OPTION_VALUES, min_size=1,
                              max_size=3))
def test_validate_starts_only_on_options_within_their_bounds(tmp_path, monkeypatch, chosen):
    """Every option is checked before anything starts: the run itself is replaced by one
    that only says it started, so a value let through shows as exit 0."""
    import testbed.api

    started = []
    monkeypatch.setattr(testbed.api, "_validate_ns3", lambda *a, **k: started.append(a) or
                        (_ for _ in ()).throw(SystemExit(0)))
    args = ["validate", str(ROOT / "scenarios" / "validate.yaml"), "--packets", "ns3",
            "--out", str(tmp_path / "out")]
    for option, value in chosen.items():
        args += [option, value]
    result = invoke(args)
    valid = all(OPTIONS[o](v) for o, v in chosen.items())
    if "--target-ci" in chosen or "--emulation-budget" in chosen:
        valid = False  # neither is taken on ns-3 alone: refused by name either way
    assert (result.exit_code == 0) == valid, (chosen, result.output)
    if result.exit_code == 2:
        assert any(o in result.output or o.lstrip("-").replace("-", "_") in result.output
                   for o in chosen), result.output
    assert not (tmp_path / "out").exists()


def test_a_judgement_that_fails_after_writing_puts_the_folder_back(tmp_path, finished,
                                                                   monkeypatch):
    """judge writes comparison.json, report.md and plots/, then fails: the validation is
    as it was, byte for byte, and nothing is left beside it."""
    import testbed.results

    folder = tmp_path / "validation"
    shutil.copytree(finished / "validation", folder)
    before = tree(folder)

    def fails(self):
        assert (folder / "comparison.json").exists()  # written by then
        raise ValueError("the answer cannot be read (on purpose)")

    monkeypatch.setattr(testbed.results.ValidationResult, "answer_lines", fails)
    result = invoke(["judge", str(folder)])
    assert result.exit_code == 2 and "on purpose" in result.output
    assert tree(folder) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["validation"]


def test_what_check_accepts_runs_seeds_past_the_traces_segments_are_refused(tmp_path):
    path = tmp_path / "seg.yaml"
    path.write_text(f"name: seg\nworkload: {{trace: {TRACE}, profile: rag, seed_segments: "
                    "true, measure_s: 600}\nseeds: 20\n")
    result = invoke(["check", str(path)])
    assert result.exit_code == 2 and "segment" in result.output


def test_ns3_rounds_on_a_trace_of_one_segment_are_refused_before_a_folder(tmp_path):
    path = tmp_path / "one.yaml"
    path.write_text(f"name: one\nworkload: {{trace: {TRACE}, profile: rag, measure_s: 600}}\n"
                    "seeds: 1\n")
    out = tmp_path / "out"
    result = invoke(["validate", str(path), "--packets", "ns3", "--out", str(out)])
    assert result.exit_code == 2 and "segment" in result.output, result.output
    assert not out.exists() or not any(out.iterdir())
