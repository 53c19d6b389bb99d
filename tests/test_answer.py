"""The answer a validation prints last: short, led by whether the claims hold, and what
would settle the inconclusive ones."""

import math

from testbed.validate.judging.sequential import seeds_to_settle
from testbed.validate.report.answer import WIDTH, answer_lines, headline, packets_line


def est(point, low=None, high=None):
    return {"point": point, "low": math.nan if low is None else low,
            "high": math.nan if high is None else high, "se": 0.01}


def claim(sched, base, diff, verdict, on="holds", draws=None, metric="ttft_mean"):
    c = {"scheduler": sched, "baseline": base, "metric": metric, "n": 90,
         "packets": est(-0.3, -0.35, -0.25), "flow": est(-0.28, -0.33, -0.2),
         "difference": est(*diff), "on_packets": on, "verdict": verdict}
    if draws:
        c["difference_with_draws"] = est(*draws)
    return c


def doc(claims, runs=12, unfaithful=0, engine="ns3", seeds=4):
    return {"claims": {"000-base": {"n": 90, "claims": claims}},
            "judged": {"measured_requests": 270, "paired_requests": 270, "seeds": seeds},
            "targets": {"runs": runs, "unfaithful_runs": unfaithful, "packets": engine}}


def test_the_answer_leads_with_the_claims_and_fits_eight_short_lines():
    claims = [claim("cla", "rr", (0.01, -0.08, 0.1), "inconclusive"),
              claim("netkv-full", "rr", (0.0, -0.03, 0.02), "agree"),
              claim("netkv-full", "cla", (0.2, 0.1, 0.3), "disagree"),
              claim("netkv-full", "cla", (0.2, 0.1, 0.3), "agree", metric="slo")]
    wall = {"total_s": 60.0, "phases": {"calibration_s": 15.0, "fabric_s": 5.0}}
    lines = answer_lines(doc(claims), wall)
    assert lines[0] == ("Claims on packets: all 3 hold. Flow model within 5 pts: "
                        "1 agree, 1 disagree, 1 inconclusive.")
    assert len(lines) + 1 <= 8 and all(len(line) <= WIDTH for line in lines), lines
    assert lines[1].startswith("claim (mean TTFT)") and len(lines) == 7  # SLO left out
    assert lines[2].startswith("CLA* vs RR") and lines[2].endswith("inconclusive")
    # the settle line: the open claim's interval narrowed around its centre
    need = seeds_to_settle(-0.08, 0.1, 4, 0.05)
    assert f"about {need - 4} more seeds (--seeds {need})" in lines[5]
    assert f"), {(need - 4) * 10.0 / 60:.1f} min." in lines[5]  # (60 - 20) s / 4 seeds
    assert lines[6].startswith("Packets: 12 ns-3 runs (deterministic); 270 requests judged")
    long = answer_lines(doc(claims), {"total_s": 4000.0, "phases": {}})
    assert long[5].endswith(f"), {(need - 4) * 1000.0 / 3600:.0f} h.")


def test_more_seeds_than_the_trace_has_segments_are_draws_of_them():
    d = doc([claim("cla", "rr", (0.01, -0.08, 0.1), "inconclusive")], seeds=52)
    d["sequential"] = {"level": 0.99, "segments": 52}
    wall = {"total_s": 52 * 7200.0, "phases": {}}
    need = seeds_to_settle(-0.08, 0.1, 52, 0.05)
    line = answer_lines(d, wall)[-2]
    assert f"(--seeds {need}: {-(-need // 52)} draws of 52 segments)" in line, line
    assert line.endswith(" days.") and len(line) <= WIDTH


def test_a_verdict_read_with_the_draws_shows_that_interval():
    c = claim("cla", "rr", (0.0, -0.02, 0.02), "inconclusive", draws=(0.04, -0.1, 0.18))
    lines = answer_lines(doc([c]))
    assert "+4.0 [-10.0, +18.0] pts" in lines[2] and "+0.0 [" not in lines[2]


def test_claims_that_do_not_hold_on_packets_are_named_in_the_first_line():
    claims = [claim("cla", "rr", (0.0, -0.02, 0.02), "agree", on="reversed"),
              claim("netkv-full", "rr", (0.0, -0.02, 0.02), "agree", on="unresolved"),
              claim("netkv-full", "cla", (0.0, -0.02, 0.02), "agree")]
    assert headline(claims) == "Claims on packets: 1 of 3 hold. Flow model within 5 pts: 3 agree."
    rows = answer_lines(doc(claims))[2:5]
    assert "reversed" in rows[0] and "unresolved" in rows[1] and "holds" in rows[2]
    assert not any(line.startswith("To settle") for line in answer_lines(doc(claims)))


def test_seeds_to_settle_narrow_the_interval_as_one_over_root_seeds():
    # centre 0, half-width 8 points at 4 seeds: the 5-point band needs (8/5)^2 x 4 seeds
    assert seeds_to_settle(-0.08, 0.08, 4, 0.05) == math.ceil(4 * (0.08 / 0.05) ** 2)
    # centre 10 points, half 8: clearing the band's edge (5 points away) is the same sum
    assert seeds_to_settle(0.02, 0.18, 4, 0.05) == math.ceil(4 * (0.08 / 0.05) ** 2)
    assert seeds_to_settle(-0.01, 0.01, 4, 0.05) == 4  # already inside
    assert seeds_to_settle(0.0, 0.1, 4, 0.05) is None  # centred on the band's edge
    assert seeds_to_settle(math.nan, 0.1, 4, 0.05) is None


def test_unfaithful_packets_and_no_claims_say_so():
    assert packets_line({"runs": 3, "unfaithful_runs": 1, "packets": "emulation"}, None,
                        None).startswith("UNFAITHFUL: 1 of 3 emulated runs")
    assert packets_line({"runs": 3, "unfaithful_runs": 0, "packets": "emulation"}, None,
                        None) == "Packets: all 3 emulated runs faithful."
    lines = answer_lines(doc([]))
    assert lines[0].startswith("No claim judged") and len(lines) == 3


def test_ns3_against_the_emulation_reads_the_replay_where_there_is_one():
    from testbed.validate.report.answer import stand_in_line

    targets = {"runs": 3, "unfaithful_runs": 0}
    stand = {"seeds": [1], "transfers_forced": {"n": 90, "median_abs_error": 0.065,
                                                 "p90_abs_error": 0.263}}
    claims = [{"verdict": "inconclusive"}] * 3
    before = stand_in_line(targets, stand, claims)
    assert before.endswith("3 inconclusive; per transfer 6.5% (p90 26.3%).")
    replay = {"overall": {"above_floor": {"n": 93, "median_abs_error": {"point": 0.041},
                                          "p90_abs_error": {"point": 0.207}}}}
    line = stand_in_line(targets, stand, claims, replay)
    assert line.endswith("3 inconclusive; replayed 4.1% (p90 20.7%).")
    assert len(line) <= 100
    # a replay refused (per-flow ECMP, faults) leaves the forced runs' figures
    assert stand_in_line(targets, stand, claims, {"refused": "per-flow"}) == before
