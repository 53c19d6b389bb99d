"""Scenario files: defaults, field-named errors, sweeps, overrides, every shipped file."""

from pathlib import Path

import pytest

from testbed.scenario import ScenarioError, load_scenario

SCENARIOS = sorted((Path(__file__).parent.parent / "scenarios").glob("*.yaml"))


def test_minimal_file_gets_the_papers_defaults(write_scenario):
    sc = load_scenario(write_scenario("name: x\nworkload: {trace: TRACE}\n"))
    spec = sc.cluster.spec()
    assert spec.n_gpus == 64 and len(spec.decode_pool) == 12
    assert sc.oracle.refresh_s == 1.0 and sc.oracle.inflight_cap == 16
    assert sc.cluster.beta_max == 64 and sc.workload.block_tokens == 16
    assert sc.slo_s() == 5.0 and sc.p_share() == 0.7 and sc.cla() == (1.0, 1.0)
    assert load_scenario(write_scenario(
        "name: y\nworkload: {trace: TRACE, profile: long-context}\n")).cla() == (1.5, 0.7)


@pytest.mark.parametrize("body, field", [
    ("workload: {trace: TRACE, lod: 1}", "workload.lod"),
    ("workload: {trace: TRACE, load: -1}", "workload.load"),
    ("cluster: {tp: 3}", "cluster"),
    ("schedulers: [rr, netkv]", "schedulers"),
    ("oracle: {refresh_s: 0}", "oracle.refresh_s"),
    ("network: {background: {tier3: 1.5}}", "network.background.tier3"),
    ("workload: {trace: TRACE, block_tokens: 48}", "workload.block_tokens"),
    ("model: gpt-5", "model"),
])
def test_invalid_fields_are_named(write_scenario, body, field):
    with pytest.raises(ScenarioError) as err:
        load_scenario(write_scenario(f"name: x\n{body}\n"))
    assert field in str(err.value)


def test_missing_trace_and_bad_yaml(write_scenario, tmp_path):
    with pytest.raises(ScenarioError, match="workload.trace: file not found"):
        load_scenario(write_scenario("name: x\nworkload: {trace: nowhere.jsonl}\n"))
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(write_scenario("name: x\nworkload: [\n"))
    with pytest.raises(ScenarioError, match="not found"):
        load_scenario(tmp_path / "absent.yaml")


def test_sweep_cells_are_validated_up_front(write_scenario):
    with pytest.raises(ScenarioError, match="sweep point: workload.load"):
        load_scenario(write_scenario(
            "name: x\nworkload: {trace: TRACE}\nsweep: {workload.load: [1.0, -2]}\n"))
    with pytest.raises(ScenarioError, match="no field 'lod'"):
        load_scenario(write_scenario(
            "name: x\nworkload: {trace: TRACE}\nsweep: {workload.lod: [1.0]}\n"))


def test_sweep_is_a_cartesian_product(write_scenario):
    sc = load_scenario(write_scenario(
        "name: x\nworkload: {trace: TRACE}\n"
        "sweep: {workload.load: [0.5, 1.0], cluster.core_oversubscription: [1, 4, 8]}\n"))
    cells = sc.points()
    assert len(cells) == 6
    point, cell = cells[-1]
    assert point == {"workload.load": 1.0, "cluster.core_oversubscription": 8}
    assert cell.cluster.spec().tier_bandwidth_gbps[3] == 12.5 and cell.sweep == {}


def test_overrides_apply_like_set(write_scenario):
    sc = load_scenario(write_scenario("name: x\nworkload: {trace: TRACE}\n"),
                       {"workload.load": 2.0, "seeds": 4})
    assert sc.workload.load == 2.0 and sc.seeds == 4


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_shipped_scenario_validates(path):
    sc = load_scenario(path)
    assert sc.points()


@pytest.mark.parametrize("extra, message", [
    ("cluster: {slowdown: {i99: 2.0}}", "cluster: .*slowdown names unknown instance 'i99'"),
    ("flowkv: {prefill_low: 0.95, prefill_high: 0.9}", "flowkv: .*low threshold"),
    ("network: {transfer_mode: scatter}", "network.transfer_mode"),
    ("reuse: {min_tokens: 0}", "reuse.min_tokens"),
])
def test_issue_7_and_8_fields_are_checked_by_name(write_scenario, extra, message):
    with pytest.raises(ScenarioError, match=message):
        load_scenario(write_scenario(f"name: x\nworkload: {{trace: TRACE}}\n{extra}\n"))
