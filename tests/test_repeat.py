"""Packets against packets: repeated runs of one seed set against each other."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from testbed.records import write_csv
from testbed.scenario import Scenario
from testbed.validate.engines.repeat import (
    REPEATS,
    engines_floor,
    packets_against_packets,
    repeat_scenario,
    spread_errors,
)
from tests.conftest import TRACE, flow_validation

FIELDS = ["request", "shard", "src", "dst", "tier", "path", "bytes", "start", "end"]
PATH = "i0>tor0>agg0>tor1>i6"
FLOORS = {2: {"transfer_floor_bytes": 1e9}}  # whole transfers of 2 GB clear it


def transfer(request, start, seconds, path=PATH, size=1e9, dst="i6"):
    """Two shards of `size` each; the slower ends `seconds` after the start."""
    return [{"request": request, "shard": k, "src": "i0", "dst": dst, "tier": 2,
             "path": path, "bytes": size, "start": start,
             "end": start + seconds * (0.9 if k == 0 else 1.0)} for k in range(2)]


def test_each_run_is_set_against_the_others_median():
    one = transfer("a", 0.0, 1.0) + transfer("b", 5.0, 2.0)
    two = transfer("a", 0.0, 1.5) + transfer("b", 5.0, 2.0)
    three = transfer("a", 0.0, 1.2) + transfer("b", 5.0, 2.0)
    errors, requests, _ = spread_errors([one, two, three], FLOORS)
    assert requests == ["a", "a", "a", "b", "b", "b"]
    # a: 1.0 against median(1.5, 1.2) = 1.35; 1.5 against 1.1; 1.2 against 1.25
    assert errors[:3] == pytest.approx([1.0 / 1.35 - 1, 1.5 / 1.1 - 1, 1.2 / 1.25 - 1])
    assert errors[3:] == [0.0, 0.0, 0.0]
    # two runs: each against the other
    errors, _, _ = spread_errors([one, two], FLOORS)
    assert errors[:2] == pytest.approx([1.0 / 1.5 - 1, 0.5])
    assert spread_errors([one], FLOORS) == ([], [], [])


def test_only_transfers_placed_alike_and_above_the_floor_count():
    one = (transfer("a", 0.0, 1.0) + transfer("b", 2.0, 1.0)
           + transfer("c", 4.0, 1.0, size=1e8))  # c: below the floor
    moved = (transfer("a", 0.0, 1.3) + transfer("b", 2.0, 1.0, dst="i7")  # b: elsewhere
             + transfer("c", 4.0, 3.0, size=1e8))
    rerouted = transfer("a", 0.0, 1.3, path="i0>tor0>agg1>tor1>i6")
    errors, requests, _ = spread_errors([one, moved], FLOORS)
    assert requests == ["a", "a"] and errors == pytest.approx([1.0 / 1.3 - 1, 0.3])
    assert spread_errors([one, rerouted], FLOORS)[0] == []  # a took another path


def test_only_transfers_offered_alike_count():
    """Where a shard, or a transfer that shared the path, started at another moment in
    one run (a lost SYN, a late prefill), the runs were not offered the same load: the
    replay is given that difference, so packets against packets leave it out."""
    base = transfer("a", 0.0, 1.0) + transfer("b", 0.5, 1.0)
    same = transfer("a", 0.0, 1.2) + transfer("b", 0.52, 1.0)  # b within 5% of its time
    assert spread_errors([base, same], FLOORS)[1] == ["a", "a", "b", "b"]
    # one shard of a started 0.2 s after its first: a's own start differs
    late_shard = transfer("a", 0.0, 1.2) + transfer("b", 0.5, 1.0)
    late_shard[1] = {**late_shard[1], "start": 0.2}
    # a's own shards differ; b, its competitor, saw a start when it did (a competitor is
    # judged by its first shard's start: by every shard's, next to none would count)
    assert spread_errors([base, late_shard], FLOORS)[1] == ["b", "b"]
    # b came 0.3 s later: b differs, and so does a's load (b shared its path)
    later = transfer("a", 0.0, 1.2) + transfer("b", 0.8, 1.0)
    assert spread_errors([base, later], FLOORS)[1] == []
    # b started alike but went elsewhere in one run (a scheduler that reads load): a's
    # load differs, b itself was placed apart
    away = transfer("a", 0.0, 1.2) + transfer("b", 0.5, 1.0, dst="i7",
                                                path="i0>tor0>agg0>tor2>i7")
    assert spread_errors([base, away], FLOORS)[1] == []
    # a transfer on a path of its own is not touched by b's move
    apart = transfer("c", 0.1, 1.0, path="i1>tor0>agg1>tor2>i9", dst="i9")
    got = spread_errors([base + apart, later + apart], FLOORS)[1]
    assert got == ["c", "c"]


def _cells(root, runs: dict[str, list[dict]]):
    """Run folders' cells as the emulation writes them, one per key."""
    cells = {}
    for key, rows in runs.items():
        cell = root / "cells" / key
        cell.mkdir(parents=True)
        write_csv(cell / "transfers.csv", rows, FIELDS)
        (cell / "summary.json").write_text(json.dumps({"fidelity": "faithful"}))
        cells[key] = cell
    return cells


def test_the_floor_over_cells_with_the_replay_on_the_same_transfers(tmp_path):
    key = "000-base/rr/seed1"
    first = transfer("a", 0.0, 1.0) + transfer("b", 0.5, 1.0)  # b came while a ran
    again = transfer("a", 0.0, 1.25) + transfer("b", 0.5, 0.8)
    cells = [_cells(tmp_path / "one", {key: first}), _cells(tmp_path / "two", {key: again})]
    replay = {key: transfer("a", 0.0, 1.1) + transfer("b", 0.5, 1.0)}
    floor = packets_against_packets(cells, FLOORS, replay)
    assert floor["runs"] == 2 and floor["cells"] == [key] and floor["n"] == 4
    # -0.2 and +0.25 for each: a 1.0 against 1.25 and back, b 1.0 against 0.8 and back
    assert floor["median_abs_error"] == pytest.approx(0.225)
    assert floor["p90_abs_error"] == pytest.approx(0.25)
    assert floor["by_arrival"]["first"]["n"] == 2 and floor["by_arrival"]["late"]["n"] == 2
    # two transfers, each judged both ways: the interval resamples transfers, not errors
    assert floor["transfers"] == 2
    low, high = floor["p90_ci"]
    assert 0.2 <= low <= floor["p90_abs_error"] <= high <= 0.25
    low, high = floor["median_ci"]
    assert 0.2 <= low <= floor["median_abs_error"] <= high <= 0.25
    same = floor["replay_same_transfers"]
    assert same["n"] == 2 and same["median_abs_error"] == pytest.approx(0.05)
    assert packets_against_packets(cells[:1], FLOORS) is None
    # a cell only one run has is not judged
    cells[1] = _cells(tmp_path / "three", {"000-base/rr/seed2": again})
    assert packets_against_packets(cells, FLOORS) is None


def test_runs_are_set_against_each_other_by_pairs(tmp_path):
    """With three runs, a transfer one run offered differently still counts in the
    pair of runs that offered it alike."""
    key = "000-base/rr/seed1"
    far = "i1>tor0>agg1>tor2>i9"  # b shares no link with a
    runs = [transfer("a", 0.0, 1.0) + transfer("b", 0.0, 2.0, path=far, dst="i9"),
            transfer("a", 0.0, 1.1) + transfer("b", 0.0, 2.2, path=far, dst="i9"),
            transfer("a", 0.4, 1.0) + transfer("b", 0.0, 2.0, path=far, dst="i9")]
    cells = [_cells(tmp_path / str(i), {key: rows}) for i, rows in enumerate(runs)]
    floor = packets_against_packets(cells, FLOORS)
    assert floor["runs"] == 3
    assert floor["n"] == 2 + 6  # a in runs 0 and 1 only (it came 0.4 s late in run 2)
    assert floor["offered_alike"] == 1.0  # both of the first run's, each in some pair


def test_packets_deciding_again_match_every_transfer_wherever_placed(tmp_path):
    """The both-engines figure's floor: a transfer placed elsewhere in the other run still
    counts (as the flow model's runs are matched to the packets'), and only where the runs
    again cover every scheduler of the first."""
    rr, la = "000-base/rr/seed1", "000-base/la/seed1"
    first = {rr: transfer("a", 0.0, 1.0), la: transfer("b", 0.0, 2.0)}
    again = {rr: transfer("a", 0.0, 1.5),
             la: transfer("b", 0.3, 1.0, dst="i7", path="i0>tor0>agg0>tor2>i7")}
    cells = [_cells(tmp_path / "one", first), _cells(tmp_path / "two", again)]
    got = engines_floor(cells)
    assert got["schedulers"] == ["la", "rr"] and got["n"] == 2
    assert got["median_abs_error"] == pytest.approx(0.5)  # a +50%, b moved: -50%
    assert got["mean_error"] == pytest.approx(0.0)
    assert packets_against_packets(cells, FLOORS)["engines"] == got
    # runs again of RR alone would understate what deciding schedulers part: not given
    rr_only = [cells[0], _cells(tmp_path / "three", {rr: again[rr]})]
    assert engines_floor(rr_only) is None
    assert packets_against_packets(rr_only, FLOORS)["engines"] is None
    assert engines_floor(cells[:1]) is None


@pytest.mark.parametrize(("floor", "ci", "kind", "says"), [
    (None, None, "floor not measured", "every scheduler again"),
    (0.30, [0.25, 0.36], "out of reach", "moves what the schedulers read"),
    (0.05, [0.04, 0.07], "within reach", "the model's own error"),
    (0.09, [0.06, 0.14], "undecided", "more repeat runs"),
])
def test_a_missed_both_engines_median_is_read_against_packets_deciding_again(
        floor, ci, kind, says):
    from testbed.validate.comparison.summary import acceptance

    doc = {"targets": {**_targets(0.12), "engines_median_abs_transfer_error": 0.2,
                       "packets_engines_median_abs_transfer_error": floor,
                       "packets_engines_median_ci": ci}}
    got, sentence = acceptance(doc)["engines_median"]
    assert got == kind and says in sentence and "20.0%" in sentence
    doc["targets"]["engines_median_abs_transfer_error"] = 0.08
    assert acceptance(doc)["engines_median"][0] == "met"


def test_the_scenario_run_again_is_its_first_seed_of_rr_where_it_has_rr():
    base = Scenario(name="r", workload={"trace": str(TRACE), "measure_s": 4.0}, seeds=3,
                    schedulers=["netkv-full", "rr", "cla"])
    again = repeat_scenario(base)
    assert again.seeds == 1 and again.schedulers == ["rr"]
    assert repeat_scenario(base.with_overrides({"schedulers": ["cla"]})).schedulers == ["cla"]


def test_a_validation_judged_with_runs_made_again_reports_the_floor(tmp_path):
    """A flow run stands in for packets: made again, it repeats itself exactly, so the
    floor is 0, and the report and summary carry it beside the replay."""
    from testbed.cli import main
    from testbed.runner import run_simulated

    base = Scenario(name="rep", workload={"trace": str(TRACE), "measure_s": 4.0},
                    schedulers=["rr", "netkv-full"], network={"ecmp": "per-pair"})
    folder = flow_validation(tmp_path / "rep-validate-x", base)
    (folder / REPEATS).mkdir()
    run_simulated(repeat_scenario(base), folder / REPEATS).folder.rename(
        folder / REPEATS / "rep-emulation-y")
    done = CliRunner().invoke(main, ["judge", str(folder), "--verbose"])
    assert done.exit_code == 0, done.output
    doc = json.loads((folder / "comparison.json").read_text())
    floor = doc["repeat"]
    assert floor["runs"] == 2 and floor["cells"] == ["000-base/rr/seed1"]
    assert floor["n"] > 0 and floor["p90_abs_error"] == 0.0
    assert floor["replay_same_transfers"]["n"] == floor["n"] // 2
    assert "packets against packets (2 runs of one seed" in " ".join(done.output.split())
    assert "## Packets against packets" in (folder / "report.md").read_text()
    # and `testbed repeat` reads the same runs from the folder
    got = CliRunner().invoke(main, ["repeat", str(folder)])
    assert got.exit_code == 0, got.output
    assert f"n={floor['n']}: median |error| 0.0%, p90 0.0%" in got.output
    assert f"same transfers, n={floor['n'] // 2}: median" in " ".join(got.output.split())
    assert "packets deciding again (rr;" in " ".join(got.output.split())


def test_the_repeat_command_names_what_it_cannot_use(tmp_path):
    from testbed.cli import main

    key = "000-base/rr/seed1"
    for name, scenario in (("a", "one"), ("b", "one"), ("c", "other")):
        run = tmp_path / name
        _cells(run, {key: transfer("x", 0.0, 1.0)})
        (run / "scenario.yaml").write_text(yaml.safe_dump({"name": scenario}))
    alone = CliRunner().invoke(main, ["repeat", str(tmp_path / "a")])
    assert alone.exit_code == 2 and "one packet run only" in alone.output
    other = CliRunner().invoke(main, ["repeat", str(tmp_path / "a"), str(tmp_path / "c")])
    assert other.exit_code == 2 and "name differs" in " ".join(other.output.split())
    flagged = tmp_path / "b" / "cells" / key / "summary.json"
    flagged.write_text(json.dumps({"fidelity": "unfaithful"}))
    bad = CliRunner().invoke(main, ["repeat", str(tmp_path / "a"), str(tmp_path / "b")])
    assert bad.exit_code == 2 and "flagged every cell" in " ".join(bad.output.split())


def test_the_floors_interval_resamples_whole_transfers():
    """A transfer judged in every pair of runs, both ways, is one draw: the same errors
    taken as independent would give a narrower interval than the transfers support."""
    from testbed.validate.judging import stats

    rng = np.random.default_rng(1)
    per_transfer = rng.uniform(0.0, 0.4, size=12)
    errors = np.repeat(per_transfer, 6)  # four runs: six pairs per transfer
    units = np.repeat(np.arange(12), 6)
    whole = stats.clustered_abs_quantile(errors, units, 0.9)
    plain = stats.bootstrap(errors, lambda a: np.quantile(np.abs(a), 0.9, axis=1))
    assert whole.n == 12 and plain.n == 72
    assert whole.point == pytest.approx(plain.point)  # the same p90 ...
    assert whole.high - whole.low > 1.5 * (plain.high - plain.low)  # ... known less well
    assert np.isnan(stats.clustered_abs_quantile([], [], 0.9).point)


def _targets(p90, floor=None, ci=None):
    return {"transfer_target": 0.05, "replay_median_abs_transfer_error": 0.03,
            "transfer_p90_target": 0.15, "replay_p90_abs_transfer_error": p90,
            "packets_p90_abs_transfer_error": floor, "packets_p90_ci": ci,
            "packets_median_abs_transfer_error": 0.02, "packets_median_ci": [0.01, 0.03]}


@pytest.mark.parametrize(("t", "kind", "says"), [
    (_targets(0.12), "met", "12.0% <= 15%"),
    (_targets(0.30), "floor not measured", "--repeats 3"),
    (_targets(0.30, 0.40, [0.25, 0.60]), "out of reach", "larger emulation.scale"),
    (_targets(0.30, 0.08, [0.05, 0.12]), "within reach", "the model's own error"),
    (_targets(0.30, 0.13, [0.08, 0.25]), "undecided", "more repeat runs"),
    (_targets(float("nan")), "not judged", "no transfer"),
])
def test_a_missed_p90_is_read_against_packets_own_floor(t, kind, says):
    from testbed.validate.comparison.summary import reach, summary_lines

    got, sentence = reach(t, "p90")
    assert got == kind and says in sentence
    lines = summary_lines({**t, "replay_median_ci": [0.02, 0.04], "replay_p90_ci": [0.1, 0.4],
                           "ttft_verdicts": {"agree": 0, "disagree": 0, "inconclusive": 0},
                           "worst_mean_ttft_error": None, "same_ranking": None, "runs": 1,
                           "unfaithful_runs": 0, "packets_runs": 4,
                           "replay_same_p90_abs_transfer_error": 0.2})
    assert any(line.startswith("replay p90 target:") for line in lines) == (
        kind not in ("met", "not judged"))
    assert not any(line.startswith("replay median target:") for line in lines)  # 3% met


def test_a_missed_median_is_read_against_packets_own_median():
    from testbed.validate.comparison.summary import reach

    t = {**_targets(0.12), "replay_median_abs_transfer_error": 0.08,
         "packets_median_abs_transfer_error": 0.30, "packets_median_ci": [0.2, 0.4]}
    kind, sentence = reach(t, "median")
    assert kind == "out of reach" and "packets repeat to a median of 30.0%" in sentence
    t["packets_median_ci"] = [0.01, 0.04]
    assert reach(t, "median")[0] == "within reach"


def test_acceptance_reads_every_target_of_a_validation():
    from testbed.validate.comparison.summary import acceptance

    doc = {"targets": {**_targets(0.20, 0.30, [0.2, 0.5]),
                       "replay_median_abs_transfer_error": 0.04,
                       "engines_median_abs_transfer_error": 0.12},
           "seed_rankings": {"tcp": {"000-base": {"seeds": 3, "same": 2}}}}
    got = {k: kind for k, (kind, _) in acceptance(doc).items()}
    assert got == {"replay_median": "met", "replay_p90": "out of reach",
                   "engines_median": "floor not measured", "same_ranking": "missed"}
    doc["seed_rankings"]["tcp"]["000-base"]["same"] = 3
    assert acceptance(doc)["same_ranking"] == ("met", "3 of 3 seeds")
    doc["seed_rankings"] = {}
    assert acceptance(doc)["same_ranking"][0] == "not judged"
