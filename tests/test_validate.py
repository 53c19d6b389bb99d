"""Comparison math on known inputs, and the flow-model replay of given transfers."""

import json
import math

import pytest

from testbed.flowsim.simulator import simulate
from testbed.scenario import Scenario
from testbed.topologies.fattree import FatTreeSpec
from testbed.topologies.traffic_classes import ENGINE_LANES
from testbed.validate.engines.flow_replay import replay_transfers
from testbed.validate.judging import model_errors
from testbed.workloads.build import build_workload
from tests.conftest import TRACE, flow_validation

GiB = 2**30


def row(request, shard, start, end, tier=2, size=GiB):
    return {"request": request, "shard": shard, "start": start, "end": end, "tier": tier,
            "bytes": size}


def test_relative_error_sign_means_flow_model_slower():
    assert model_errors.relative_error(1.1, 1.0) == pytest.approx(0.1)
    assert model_errors.relative_error(0.5, 1.0) == pytest.approx(-0.5)
    with pytest.raises(ValueError):
        model_errors.relative_error(1.0, 0.0)


def test_matching_and_error_summary_on_known_numbers():
    reference = [row("a", 0, 0, 1.0), row("a", 1, 0, 2.0, tier=3, size=8 * GiB),
                 row("b", 0, 1, 2.0, tier=3), row("c", 0, 0, 1.0)]
    model = [row("a", 0, 0, 1.2), row("a", 1, 0, 1.0, tier=3, size=8 * GiB),
             row("b", 0, 1, 2.5, tier=3)]
    pairs, missing = model_errors.match_transfers(reference, model)
    assert missing == [("c", 0)]
    assert [p.error for p in pairs] == pytest.approx([0.2, -0.5, 0.5])
    summary = model_errors.error_summary(pairs)
    assert summary["n"] == 3
    assert summary["median_abs_error"] == pytest.approx(0.5)
    assert summary["mean_error"] == pytest.approx(0.2 / 3)
    assert summary["by_tier"]["2"]["median_abs_error"] == pytest.approx(0.2)
    assert summary["by_tier"]["3"]["n"] == 2
    assert set(summary["by_size"]) == {"1-4 GiB", "4-16 GiB"}
    assert model_errors.size_bucket(100) == "< 1 GiB"


def test_rankings_and_kendall_tau():
    assert model_errors.ranking({"rr": 3.0, "cla": 2.0, "netkv": 1.0}) == ["netkv", "cla", "rr"]
    assert model_errors.kendall_tau(["a", "b", "c"], ["a", "b", "c"]) == 1.0
    assert model_errors.kendall_tau(["a", "b", "c"], ["c", "b", "a"]) == -1.0
    assert model_errors.kendall_tau(["a", "b", "c"], ["b", "a", "c"]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        model_errors.kendall_tau(["a"], ["b"])


def test_metric_comparison_and_ranking_agreement():
    packets = {"rr": {"ttft_mean_ms": 2000.0, "transfer_mean_ms": 900.0},
               "cla": {"ttft_mean_ms": 1800.0, "transfer_mean_ms": 800.0},
               "netkv-full": {"ttft_mean_ms": 1600.0, "transfer_mean_ms": math.nan}}
    flows = {"rr": {"ttft_mean_ms": 2200.0, "transfer_mean_ms": 990.0},
             "cla": {"ttft_mean_ms": 1980.0, "transfer_mean_ms": 880.0},
             "netkv-full": {"ttft_mean_ms": 1760.0, "transfer_mean_ms": 700.0}}
    rows = {r["scheduler"]: r for r in model_errors.metric_comparison(packets, flows,
                                                                 ("ttft_mean_ms",
                                                                  "transfer_mean_ms"))}
    assert rows["rr"]["ttft_mean_ms_error"] == pytest.approx(0.10)
    assert rows["netkv-full"]["transfer_mean_ms_error"] is None
    agreement = model_errors.ranking_agreement(packets, flows)
    assert agreement["same_order"] and agreement["kendall_tau"] == 1.0
    flows["cla"]["ttft_mean_ms"] = 2300.0
    assert not model_errors.ranking_agreement(packets, flows)["same_order"]


def test_replay_of_a_lone_transfer_follows_the_path_bandwidth():
    spec = FatTreeSpec()
    size = 4 * GiB
    shards = [{"request": "r", "shard": k, "src": "i0", "dst": "i15", "bytes": size / 4,
               "start": 1.0} for k in range(4)]
    out = replay_transfers(spec, shards)
    assert len(out) == 4
    # per-transfer ECMP: the 4 shards share one 25 Gbps cross-pod path
    assert all(r["end"] - r["start"] == pytest.approx(size / (25e9 / 8)) for r in out)
    spread = replay_transfers(spec, shards, ecmp="per-flow", seed=3)
    assert max(r["end"] for r in spread) < max(r["end"] for r in out)


def test_replaying_the_simulators_own_transfers_reproduces_them(trace_path):
    """On a single-path fabric both must agree exactly: same network model, same inputs."""
    sc = Scenario(name="self", workload={"trace": str(trace_path), "measure_s": 6.0},
                  cluster={"aggs_per_pod": 1, "cores_per_agg": 1})
    result = simulate(sc, "netkv-full", 1, build_workload(sc, 1))
    assert len(result.transfers) > 20
    replayed = replay_transfers(sc.cluster.spec(), result.transfers)
    pairs, missing = model_errors.match_transfers(result.transfers, replayed)
    assert not missing
    assert model_errors.error_summary(pairs)["p90_abs_error"] < 1e-6


def test_replaying_the_engine_s_transfers_on_its_lanes_reproduces_them(trace_path):
    """Through the Transfer Engine a pair's shards wait for its lanes in the simulator;
    the replay, given the lanes, holds the same shards as long (without, it errs)."""
    sc = Scenario(name="self", workload={"trace": str(trace_path), "measure_s": 6.0},
                  cluster={"aggs_per_pod": 1, "cores_per_agg": 1},
                  emulation={"kv_transport": "mooncake"})
    result = simulate(sc, "netkv-full", 1, build_workload(sc, 1))
    spec = sc.cluster.spec()

    def p90(rows):
        pairs, missing = model_errors.match_transfers(result.transfers, rows)
        assert not missing
        return model_errors.error_summary(pairs)["p90_abs_error"]

    assert p90(replay_transfers(spec, result.transfers, lanes=ENGINE_LANES)) < 1e-6
    assert p90(replay_transfers(spec, result.transfers)) > 0.01


def test_compare_command_on_two_run_folders(tmp_path):
    from click.testing import CliRunner

    from testbed.cli import main
    from testbed.records import PARTIAL
    from testbed.runner import run_simulated

    base = Scenario(name="cmp", workload={"trace": str(TRACE), "measure_s": 4.0},
                    schedulers=["rr", "netkv-full"])
    a = run_simulated(base, tmp_path / "a").folder
    b = run_simulated(base.with_overrides({"network.ecmp": "per-flow"}), tmp_path / "b").folder
    same = CliRunner().invoke(main, ["compare", str(a), str(a), "--out", str(tmp_path / "s")])
    assert same.exit_code == 0, same.output
    doc = json.loads((tmp_path / "s" / "comparison.json").read_text())
    assert doc["transfers"]["p90_abs_error"] == 0.0
    assert doc["points"]["000-base"]["ranking"]["same_order"]
    diff = CliRunner().invoke(main, ["compare", str(a), str(b)])
    assert diff.exit_code == 0, diff.output
    report = (b / "compare" / "report.md").read_text()
    assert "| netkv-full |" in report and "tier 3" in report
    doc = json.loads((b / "compare" / "comparison.json").read_text())
    assert doc["transfers"]["mean_error"] < 0  # per-flow ECMP spreads a transfer: faster
    (b / PARTIAL).write_text("run interrupted: test\n")
    refused = CliRunner().invoke(main, ["compare", str(a), str(b)])
    assert refused.exit_code == 2 and "did not finish" in refused.output


def test_the_validation_document_and_report_from_flow_runs(tmp_path):
    """The whole judging path without packets: a flow run stands in for the emulation.
    Replaying a run through the model that made it must agree to rounding, and the TCP
    terms can only add time."""
    from testbed.runner import run_simulated
    from testbed.validate.comparison.sections import build_document, flow_scenario
    from testbed.validate.comparison.summary import summary_lines
    from testbed.validate.report.render import render_validation

    base = Scenario(name="doc", workload={"trace": str(TRACE), "measure_s": 6.0}, seeds=2,
                    schedulers=["rr", "netkv-full"], network={"ecmp": "per-pair"})
    ref = run_simulated(base, tmp_path / "ref").folder
    tcp = run_simulated(flow_scenario(base, {1: 1.0, 2: 1.0, 3: 1.0}, {}), tmp_path / "tcp").folder
    cal = {"capacity_factor": {"1": 1.0, "2": 1.0, "3": 1.0}, "scale": 2e-4, "time_dilation": 1,
           "tiers": {"3": {"pair": ["i0", "i8"], "factor": 1.0, "overhead_s": 0.0, "r2": 1.0}}}
    doc = build_document(base, ref, {"uncalibrated": ref, "calibrated": ref, "tcp": tcp}, cal,
                         {1: 1.0, 2: 1.0, 3: 1.0})
    assert doc["whole_transfers"]["replay_calibrated"]["p90_abs_error"] < 1e-6
    assert doc["whole_transfers"]["replay_tcp"]["mean_error"] > 0
    assert doc["whole_transfers"]["replay_tcp"]["ci"]["median_abs_error"]["low"] > 0
    ablation = doc["tcp_ablation"]
    # without the tail the TCP model comes closer to the fluid run it replays
    assert ablation["without the tail"]["mean_error"] < \
        doc["whole_transfers"]["replay_tcp"]["mean_error"]
    verdicts = doc["ttft_verdicts"]["calibrated"]["000-base"]
    assert {v["verdict"] for v in verdicts.values()} == {"agree"}
    assert all(v["point"] == 0.0 and v["n"] >= 20 for v in verdicts.values())
    assert doc["seed_rankings"]["calibrated"]["000-base"] == {"seeds": 2, "same": 2, "share": 1.0}
    floors = doc["validity"]["tiers"]
    assert set(floors) == {"1", "2", "3"}
    n_above = doc["whole_above_floor"]["replay_tcp"]["n"]
    n_below = doc["whole_below_floor"]["replay_tcp"]["n"]
    assert n_above + n_below == doc["whole_transfers"]["replay_tcp"]["n"] > 0
    report = render_validation(doc, [], tmp_path)
    assert "agree within 5%" in report and "Validity of the replica" in report
    # a run flagged unfaithful stays in the tables (marked) but not in the verdicts
    import shutil

    emu = shutil.copytree(ref, tmp_path / "emu")
    flagged = emu / "cells" / "000-base" / "rr" / "seed1" / "summary.json"
    flagged.write_text(json.dumps({**json.loads(flagged.read_text()), "fidelity": "unfaithful"}))
    doc2 = build_document(base, emu, {"uncalibrated": ref, "calibrated": ref, "tcp": tcp}, cal,
                          {1: 1.0, 2: 1.0, 3: 1.0})
    assert doc2["excluded_runs"] == ["000-base/rr/seed1"]
    left = doc2["ttft_verdicts"]["tcp"]["000-base"]["rr"]  # seed 2 only
    assert left["n"] < doc["ttft_verdicts"]["tcp"]["000-base"]["rr"]["n"]
    assert "rr" in {m["scheduler"] for m in doc2["tcp"]["000-base"]["metrics"]}
    assert doc2["fidelity"]["000-base"]["rr"] == "unfaithful"
    assert summary_lines(doc2["targets"])[-1].startswith("UNFAITHFUL: 1 of 4")
    assert "without slow start" in report
    assert summary_lines(doc["targets"])[-1] == "all 4 emulated runs faithful"


def test_judge_reruns_the_flow_side_of_a_finished_validation(tmp_path):
    from click.testing import CliRunner

    from testbed.cli import main

    base = Scenario(name="jdg", workload={"trace": str(TRACE), "measure_s": 4.0},
                    schedulers=["rr", "netkv-full"], network={"ecmp": "per-pair"})
    folder = flow_validation(tmp_path / "jdg-validate-x", base)  # a flow run for packets
    done = CliRunner().invoke(main, ["judge", str(folder)])
    assert done.exit_code == 0, done.output
    answer = done.output.splitlines()
    assert answer[0].startswith("Claims on packets: ") and len(answer) <= 8, answer
    assert "Packets: all 2 emulated runs faithful." in answer
    assert "mean TTFT at the packets' placements" not in done.output
    done = CliRunner().invoke(main, ["judge", str(folder), "--verbose"])  # every figure too
    assert done.exit_code == 0, done.output
    assert "mean TTFT at the packets' placements" in " ".join(done.output.split())
    assert done.output.splitlines()[-len(answer):][0] == answer[0]
    doc = json.loads((folder / "comparison.json").read_text())
    assert doc["whole_transfers"]["replay_calibrated"]["p90_abs_error"] < 1e-6
    report = (folder / "report.md").read_text()
    assert report.startswith("# Validation: jdg") and "Scheduling divergence" in report
    # forced to the stand-in's placements, the flow model takes every one of them
    forced = doc["decisions"]["forced"]["000-base"]
    assert set(forced) == {"rr", "netkv-full"}
    assert all(a["n"] > 0 and a["both"] == a["n"] for a in forced.values())
    met = doc["decisions"]["overlap"]["000-base"]
    assert set(met) == {"rr", "netkv-full"}
    assert all(set(runs) == {"packets", "free", "forced"} and runs["packets"]["n"] > 0
               for runs in met.values())
    assert "own prefill, same tier" in report
    (folder / "calibration.json").unlink()
    bad = CliRunner().invoke(main, ["judge", str(folder)])
    # the console wraps long lines (a long temporary path): compare with spaces folded
    assert bad.exit_code == 2 and "not a validation folder" in " ".join(bad.output.split())


def test_packet_draws_of_one_workload_say_how_often_a_seeds_ranking_repeats(tmp_path):
    from testbed.validate.comparison.verdicts import draw_rankings

    means = {1: (3.0, 2.0, 1.0), 2: (3.0, 1.0, 2.0), 3: (3.0, 2.0, 1.0), 4: (3.0, 2.0, 1.0),
             5: (1.0, 2.0, 3.0)}  # seeds 1, 3, 5 replay one workload, 2 and 4 another
    cells = {}
    for seed, values in means.items():
        for sched, mean in zip(("rr", "cla", "netkv-full"), values, strict=True):
            cell = tmp_path / sched / f"seed{seed}"
            cell.mkdir(parents=True)
            (cell / "summary.json").write_text(json.dumps({"ttft_mean_ms": mean}))
            cells[f"000-base/{sched}/seed{seed}"] = cell
    groups = {1: 1, 2: 2, 3: 1, 4: 2, 5: 1}
    # pairs (1,3) alike, (1,5) and (3,5) not; (2,4) not
    assert draw_rankings(cells, groups) == {"000-base": {"pairs": 4, "alike": 1,
                                                         "share": 0.25}}
    assert draw_rankings(cells, None) == {}
    assert draw_rankings(cells, {k: k for k in means}) == {}  # no workload ran twice
