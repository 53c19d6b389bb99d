"""Bad input, as a new user writes it: every case ends in `error: ...` naming the field,
line or file, exit 2, no traceback and nothing half-started; signals end a run with the
conventional code and a PARTIAL that says which signal."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from testbed.cli import main
from testbed.records import PARTIAL
from tests.conftest import ROOT, TRACE
from tests.emulation.conftest import wait_for

HEAD = f"name: x\nworkload: {{trace: {TRACE}}}\n"
WL = f"workload: {{trace: {TRACE}, "


def run(args: list[str], cwd=None):
    result = CliRunner().invoke(main, args, catch_exceptions=True)
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        repr(result.exception)
    return result


@pytest.mark.parametrize("body, named", [
    (HEAD + "cluster: {core_oversubscription: .inf}\n", "cluster.core_oversubscription"),
    (HEAD + "timing: {iter_base_s: 0, iter_per_seq_s: 0, prefill_per_token_s: 0, "
     "prefill_base_s: 0}\n", "timing"),
    ("name: x\n" + WL + "input_length: " + "9" * 400 + "}\n", "workload.input_length"),
    ("name: " + "a" * 300 + "\n", "name"),
    ("name: x\n" + WL + "load: .inf, trace_loop: true}\n", "workload.load"),
    ("name: x\n" + WL + "warmup_s: .inf}\n", "workload.warmup_s"),
    ("name: x\n" + WL + "measure_s: 1.0e9}\n", "workload.measure_s"),
    (HEAD + "cluster: {pods: 10000}\n", "GPUs, more than 65,536"),
    (HEAD + "cluster: {gpus_per_server: 1000000}\n", "gpus_per_server"),
    (HEAD + "sweep: {workload.load: [" + ",".join(str(1 + i / 1000) for i in range(90))
     + "], seed: [" + ",".join(map(str, range(90))) + "], oracle.refresh_s: ["
     + ",".join(str(1 + i) for i in range(100)) + "]}\n", "810,000 points"),
    (HEAD + "sweep:\n  a: &a [1, 1]\n  b: [*a, *a]\n", "aliases"),
    (HEAD + "oracle: {refresh_s: 1.0e-9}\n", "oracle.refresh_s"),
    (HEAD + "network: {background: {change_s: 1.0e-9}}\n", "network.background.change_s"),
    (HEAD + "network: {reprioritize_s: 1.0e-9}\n", "network.reprioritize_s"),
    (HEAD + "flowkv: {cycle_s: 1.0e-9}\n", "flowkv.cycle_s"),
    (HEAD + "cluster: {latency_us: [.nan, 1, 1, 1]}\n", "cluster.latency_us.0"),
    (HEAD + "cluster: {latency_us: [-1, 1, 1, 1]}\n", "cluster.latency_us.0"),
    (HEAD + "seed: 1\nseed: 2\n", "duplicate key 'seed'"),
    (HEAD + "seeds: true\n", "seeds"),
    (HEAD + "cluster: {nvlink_gbps: .inf}\n", "cluster.nvlink_gbps"),
    (HEAD + "emulation: {poll_s: .inf}\n", "emulation.poll_s"),
    (HEAD + "drain_s: .inf\n", "drain_s"),
    (HEAD + "cluster: {host_gbps: .inf}\n", "cluster.host_gbps"),
    (HEAD + "sweep: {'workload.load,': [1, 2]}\n", "empty field name"),
    # physically absurd: parses, would even run, describes no machine
    (HEAD + "cluster: {memory_gb: 1.0e-9}\n", "cluster.memory_gb"),
    (HEAD + "cluster: {memory_gb: 1.0, memory_reserve_gb: 0.5}\n",
     "below the KV of this workload's smallest request"),
    (HEAD + "model: {n_layers: 1000000, n_kv_heads: 1000000, d_head: 1000000}\n",
     "n_layers x n_kv_heads x d_head"),
    (HEAD + "cluster: {host_gbps: 1.0e6}\n", "cluster.host_gbps: 1e+06 Gbit/s is above any NIC"),
    (HEAD + "cluster: {nvlink_gbps: 1.0e6}\n", "cluster.nvlink_gbps"),
    (HEAD + "cluster: {core_oversubscription: 1.0000001}\n",
     "cluster.core_oversubscription: 1.0000001 changes no link"),
])
@pytest.mark.parametrize("command", ["check", "simulate", "topology"])
def test_bad_scenarios_are_refused_with_the_field_named(tmp_path, body, named, command):
    path = tmp_path / "s.yaml"
    path.write_text(body)
    t0 = time.perf_counter()
    result = run([command, str(path), *(["--out", str(tmp_path / "out")]
                                        if command == "simulate" else [])])
    assert time.perf_counter() - t0 < 30  # a hang guard, not a speed target
    assert result.exit_code == 2, result.output
    assert named in result.output, result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()  # nothing half-started


def test_bad_set_values_and_non_utf8_files_are_named(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(HEAD)
    result = run(["check", str(good), "--set", "workload.load=[1"])
    assert result.exit_code == 2 and "workload.load" in result.output
    result = run(["check", str(good), "--set", "workload.load=&a 1"])
    assert result.exit_code == 0  # an anchor alone is harmless
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"name: x\ndescription: \xff\xfe\n")
    for command in ("check", "simulate", "topology"):
        result = run([command, str(bad)])
        assert result.exit_code == 2 and "not UTF-8" in result.output, result.output


@pytest.mark.parametrize("lines, named", [
    ([{"timestamp": 5, "input_length": 100, "output_length": 5, "hash_ids": [1]}] * 5,
     "arrive at the same timestamp"),
    ([{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1]},
      {"timestamp": 1e308, "input_length": 100, "output_length": 5, "hash_ids": [1]}],
     "trace.jsonl:2: field 'timestamp'"),
    ([{"timestamp": 0, "input_length": 10**12, "output_length": 5, "hash_ids": [1]}],
     "trace.jsonl:1: field 'input_length'"),
])
def test_bad_traces_are_named_by_line(tmp_path, lines, named):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    path = tmp_path / "s.yaml"
    path.write_text(f"name: x\nworkload: {{trace: {trace}, profile: all}}\n")
    result = run(["check", str(path)])
    assert result.exit_code == 2 and named in result.output, result.output
    good = {"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1]}
    trace.write_bytes(json.dumps(good).encode() + b"\n\xff\n")
    result = run(["check", str(path)])
    assert result.exit_code == 2 and "trace.jsonl:2: not UTF-8" in result.output


def test_out_where_no_folder_can_be_made_is_an_error_not_a_traceback(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(HEAD)
    blocker = tmp_path / "file"
    blocker.write_text("")
    for out in (blocker / "x", "/proc/netkv-testbed-x"):
        result = run(["simulate", str(path), "--quiet", "--out", str(out)])
        assert result.exit_code == 2, result.output
        assert str(out) in result.output and "Traceback" not in result.output


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    path = out / "s.yaml"
    path.write_text(HEAD + "schedulers: [rr]\n")
    result = run(["simulate", str(path), "--quiet", "--out", str(out)])
    assert result.exit_code == 0, result.output
    (folder,) = out.glob("x-flowsim-*")
    return folder


@pytest.mark.parametrize("damage, named", [
    (lambda f: _summary(f).write_text("{not json"), "not a readable JSON summary"),
    (lambda f: _summary(f).write_text(""), "not a readable JSON summary"),
    (lambda f: _summary(f).write_text("[1, 2]"), "expected a JSON object, got list"),
    (lambda f: _summary(f).with_name("transfers.csv").write_text("request,shard\nr1,x\n"),
     "missing column(s)"),
    (lambda f: _summary(f).with_name("transfers.csv").write_text(
        "request,shard,tier,bytes,start,end\nr1,zero,3,1,0,1\n"), "transfers.csv:2"),
])
def test_compare_names_the_damaged_file(tmp_path, finished_run, damage, named):
    model = tmp_path / "model"
    shutil.copytree(finished_run, model)
    damage(model)
    result = run(["compare", str(finished_run), str(model), "--out", str(tmp_path / "c")])
    assert result.exit_code == 2, result.output
    assert named in result.output and "Traceback" not in result.output


def _summary(folder):
    return next(folder.glob("cells/*/*/seed*/summary.json"))


def test_an_unexpected_error_is_one_line_and_a_saved_traceback(tmp_path, monkeypatch):
    import testbed.cli.flow as flow

    def boom(*_args, **_kwargs):
        raise ZeroDivisionError("planted")

    monkeypatch.setattr("testbed.workloads.build.build_workload", boom)
    path = tmp_path / "s.yaml"
    path.write_text(HEAD)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    result = run(["check", str(path)])
    del flow
    assert result.exit_code == 1, result.output
    assert "internal error: ZeroDivisionError: planted" in result.output
    (saved,) = tmp_path.glob("netkv-testbed-crash-*.txt")
    assert "Traceback" in saved.read_text() and "Traceback" not in result.output


@pytest.mark.parametrize("sig, code, reason", [(signal.SIGINT, 130, "SIGINT"),
                                               (signal.SIGTERM, 143, "SIGTERM")])
def test_a_signal_ends_simulate_with_its_code_and_keeps_finished_cells(tmp_path, sig, code,
                                                                      reason):
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + "schedulers: [rr, cla, netkv-full]\nseeds: 200\n")
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "simulate", str(path),
                             "--quiet", "--out", str(tmp_path / "out")], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        done = wait_for(lambda: list(tmp_path.glob("out/*/cells/*/*/seed*/summary.json")),
                        120, "a finished cell")
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, out.decode()[-2000:]
    assert b"Traceback" not in out
    (folder,) = tmp_path.glob("out/*")
    assert reason in (folder / PARTIAL).read_text()
    assert all(p.exists() for p in done)  # finished cells are kept


def test_the_size_estimate_matches_the_workload_it_describes(write_scenario):
    from testbed.estimate import estimate
    from testbed.scenario import load_scenario
    from testbed.workloads.build import build_workload

    for extra in ("", "workload: {trace: TRACE, load: 3, measure_s: 120, profile: all, "
                  "trace_loop: true}\n"):
        sc = load_scenario(write_scenario("name: x\n" + (extra or "workload: {trace: TRACE}\n")))
        size = estimate(sc)
        built = len(build_workload(sc, sc.seed).requests)
        # the offered rate times the duration; a trace window is burstier than its mean
        assert 0.5 * built <= size.requests <= 2 * built + 2, (size.requests, built)
        assert size.flows == size.requests * sc.cluster.tp
        assert size.runs == len(sc.schedulers) and size.memory_bytes > 0


def test_a_run_too_large_for_the_machine_is_refused_unless_forced(tmp_path, monkeypatch):
    import testbed.estimate as estimate

    path = tmp_path / "s.yaml"
    path.write_text(HEAD + "schedulers: [rr]\n")
    monkeypatch.setattr(estimate, "MAX_REQUESTS", 10)
    for command in ("check", "simulate"):
        result = run([command, str(path), "--out", str(tmp_path / "out")]
                     if command == "simulate" else [command, str(path)])
        assert result.exit_code == 2, result.output
        assert "too large to run here" in result.output and "more than 10 " in result.output
    assert not (tmp_path / "out").exists()
    result = run(["simulate", str(path), "--force", "--quiet", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    monkeypatch.setattr(estimate, "MAX_REQUESTS", 5_000_000)
    result = run(["check", str(path)])
    assert result.exit_code == 0 and "size    :" in result.output


def test_jobs_auto_uses_the_cores_the_runs_and_the_memory_there_are():
    from testbed.estimate import Estimate, local_processes

    def size(requests, runs, memory=1e9):
        return Estimate(points=1, runs=runs, requests=requests, flows=0, periodic_events=0,
                        memory_bytes=memory)

    big = 100_000  # requests of one run: seconds each
    assert local_processes(size(big, 24), cores=2, available_bytes=64e9) == 2
    assert local_processes(size(big, 3), cores=16, available_bytes=64e9) == 3  # runs
    # memory: 80% of 10 GB holds two runs of 3.5 GB, not three
    assert local_processes(size(big, 24, 3.5e9), cores=16, available_bytes=10e9) == 2
    assert local_processes(size(big, 24, 30e9), cores=16, available_bytes=10e9) == 1
    assert local_processes(size(big, 24), cores=16, available_bytes=None) == 16
    # a sweep that takes less than a pool's start stays in this process; many small
    # runs together do not
    assert local_processes(size(50, 9), cores=16, available_bytes=64e9) == 1
    assert local_processes(size(50, 120), cores=16, available_bytes=64e9) == 16


def test_jobs_takes_a_number_or_auto_and_names_anything_else(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + "schedulers: [rr]\n")
    result = run(["simulate", str(path), "--jobs", "many", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "'many'" in result.output and "auto" in result.output
    assert not (tmp_path / "out").exists()
    result = run(["simulate", str(path), "--quiet", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
