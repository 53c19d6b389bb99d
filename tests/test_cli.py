"""The testbed CLI: help that teaches, tables, clear errors with exit code 2."""

from click.testing import CliRunner

from testbed.cli import main
from tests.conftest import ROOT

DEFAULT = str(ROOT / "scenarios" / "default.yaml")


def test_help_lists_commands():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for cmd in ("simulate", "check", "topology", "emulate", "validate", "calibrate"):
        assert cmd in result.output


def test_simulate_prints_the_table_and_folder(tmp_path):
    result = CliRunner().invoke(main, [
        "simulate", DEFAULT, "--out", str(tmp_path), "--seeds", "1",
        "--set", "workload.measure_s=4",
    ])
    assert result.exit_code == 0, result.output
    assert "NetKV-Full" in result.output and "CLA*" in result.output
    assert str(tmp_path) in result.output


def test_quiet_prints_only_the_folder(tmp_path):
    result = CliRunner().invoke(main, [
        "simulate", DEFAULT, "--out", str(tmp_path), "--seeds", "1",
        "--set", "workload.measure_s=3", "--quiet",
    ])
    assert result.exit_code == 0
    assert result.output.strip().startswith(str(tmp_path))


def test_several_scenarios_run_in_one_call_a_folder_and_a_table_each(tmp_path):
    skew = str(ROOT / "scenarios" / "exp8-skew.yaml")
    result = CliRunner().invoke(main, [
        "simulate", DEFAULT, skew, "--out", str(tmp_path), "--seeds", "1",
        "--set", "workload.measure_s=3", "--jobs", "2"])
    assert result.exit_code == 0, result.output
    folders = sorted(p.name.split("-flowsim-")[0] for p in tmp_path.iterdir())
    assert folders == ["default", "exp8-skew"]
    assert "# default: flow-level simulation" in result.output
    assert "# exp8-skew: flow-level simulation" in result.output
    assert "2 scenarios, " in result.output and "on 2 local processes" in result.output
    # a scenario that cannot load stops the call before any runs
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nworkload: {load: zero}\n")
    result = CliRunner().invoke(main, ["simulate", DEFAULT, str(bad), "--out",
                                       str(tmp_path / "none")])
    assert result.exit_code == 2 and "load" in result.output
    assert not (tmp_path / "none").exists()


def test_bad_input_exits_2_naming_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nworkload: {load: zero}\n")
    result = CliRunner().invoke(main, ["simulate", str(bad), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert "workload.load" in result.output
    assert not (tmp_path / "r").exists()  # nothing half-started
    result = CliRunner().invoke(main, ["check", DEFAULT, "--set", "nope"])
    assert result.exit_code == 2


def test_check_and_topology_describe_the_scenario():
    result = CliRunner().invoke(main, ["check", DEFAULT])
    assert result.exit_code == 0 and "scenario is valid" in result.output
    result = CliRunner().invoke(main, ["topology", DEFAULT])
    assert result.exit_code == 0 and "cross pod" in result.output


def test_packet_commands_stop_on_bad_input_before_anything_starts(tmp_path):
    """A malformed trace line or scenario field: exit 2 naming it, no folder, no fabric."""
    trace = tmp_path / "bad.jsonl"
    good = (ROOT / "data" / "traces" / "mooncake_synthetic_trace.jsonl").read_text().splitlines()
    trace.write_text("\n".join(good[:3] + ['{"timestamp": 1, "input_length": "many"}']) + "\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"name: s\nworkload: {{trace: {trace}}}\n")
    for cmd in ("emulate", "validate"):
        result = CliRunner().invoke(main, [cmd, str(scenario), "--out", str(tmp_path / "r")])
        assert result.exit_code == 2, result.output
        assert f"{trace.name}:4" in result.output
        assert not (tmp_path / "r").exists()
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nemulation: {time_dilation: 0.5}\n")
    for cmd in ("emulate", "validate", "calibrate"):
        result = CliRunner().invoke(main, [cmd, str(bad)])
        assert result.exit_code == 2
        assert "emulation.time_dilation" in result.output


def test_help_of_packet_commands_teaches():
    for cmd in ("emulate", "validate", "calibrate"):
        result = CliRunner().invoke(main, [cmd, "--help"])
        assert result.exit_code == 0
        assert "root" in result.output
