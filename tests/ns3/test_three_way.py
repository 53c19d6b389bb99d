"""Three engines, one verdict: ns-3 judged against the emulation's runs with the flow
model's own statistics, the flow model against ns-3, and one answer over both. Without
root, ns-3's own validation stands in for the emulation's (its packets' folder named as an
emulation run): ns-3 judged against itself must agree exactly, which any pairing slip
(seeds, schedulers, requests or transfers crossed) breaks."""

import json

import pytest

from testbed.results import ValidationResult
from testbed.scenario import load_scenario
from testbed.sweep import Executor
from testbed.validate.pipelines import three_way
from testbed.validate.pipelines.judge_folder import judge_again
from testbed.validate.pipelines.ns3_pipeline import validate_ns3
from testbed.validate.report.answer import WIDTH
from tests.conftest import ROOT


def test_ns3_against_itself_agrees_exactly_and_the_answer_has_three_engines(tmp_path):
    sc = load_scenario(ROOT / "scenarios" / "validate.yaml",
                       {"workload.warmup_s": 1, "workload.measure_s": 3, "seeds": 2,
                        "emulation.time_dilation": 1,  # its twin is ns-3 itself, exactly
                        "schedulers": ["rr", "cla", "netkv-full"]})
    with Executor.local(2) as pool:
        folder = validate_ns3(sc, tmp_path, executor=pool)
        (packets,) = folder.glob("*-ns3-*")
        packets.rename(folder / packets.name.replace("-ns3-", "-emulation-"))
        judge_again(folder)  # the stand-in "emulation" validation, judged as one
        three_way.run(sc, folder, pool, None, lambda _line: None, budget_s=None)
    doc = json.loads((folder / "comparison.json").read_text())
    stand = doc["three_way"]["stand_in"]
    assert stand["seeds"] == [1, 2] and stand["verdict"] == "agree"
    primary = [c for by in stand["claims"].values() for c in by["claims"]
               if c["metric"] == "ttft_mean"]
    assert len(primary) == 3  # CLA* vs RR, NetKV-Full vs RR and vs CLA*
    for c in primary:
        # the same records: equal to the last bits numpy's summation order leaves
        assert c["packets"]["point"] == pytest.approx(c["flow"]["point"], abs=1e-12)
        assert abs(c["difference"]["point"]) < 1e-12 and c["verdict"] == "agree"
    for which in ("transfers_forced", "transfers_deciding"):
        assert stand[which]["n"] > 0 and stand[which]["p90_abs_error"] == 0.0
    # the flow model's verdicts against ns-3 are its ns-3 validation's, on the same seeds
    theirs = json.loads((three_way.ns3_validation(folder) / "comparison.json").read_text())
    assert doc["three_way"]["flow_vs_ns3"]["claims"] == theirs["claims"]
    lines = ValidationResult(folder).answer_lines()
    assert len(lines) <= 7 and all(len(line) <= WIDTH for line in lines), lines
    assert lines[0].startswith("Claims on packets: emulation ")
    assert lines[1].split()[:4] == ["claim", "(mean", "TTFT)", "emulation"]
    assert all(row.split()[-2:] == ["+0.0", "agree"] for row in lines[2:5]), lines
    assert lines[-1] == ("ns-3 vs emulation (2 seeds; 6 runs faithful): 3 agree; per "
                         "transfer 0.0% (p90 0.0%).")
    report = (folder / "report.md").read_text()
    assert "## ns-3 against the emulation" in report and "Overall: **agree**" in report
    # judged again from its folders: the same three-way section
    again = judge_again(folder)
    assert again["three_way"]["stand_in"]["claims"] == stand["claims"]
    # other flow models, on both packet engines: against ns-3 standing in for the
    # emulation and against ns-3 itself, the same packets, so the same rows
    from testbed.validate.pipelines.judge_folder import with_flow_models

    rows = with_flow_models(folder, ["fixed-bandwidth"])["flow_models"]
    assert rows["ns3"]["packets"] == "ns3" and not rows["ns3"].get("ns3")
    assert [r["model"] for r in rows["models"]] == ["max-min", "fixed-bandwidth"]
    for mine, theirs in zip(rows["models"], rows["ns3"]["models"], strict=True):
        assert mine["targets"] == theirs["targets"]
    shown = ValidationResult(folder).answer_lines()
    assert sum(line.startswith("fixed-bandwidth ") for line in shown) == 2
