"""The sentences that explain a verdict (pure words; the rules are in decision.py)."""

from __future__ import annotations

import math

from testbed.model.extensions.plugins import display_name
from testbed.validate.judging import targets
from testbed.validate.judging.decision import HIGHER_IS_BETTER, REACH_KEYS, Verdict
from testbed.validate.judging.stats import Interval

METRIC_NAMES = {"ttft_mean": "mean TTFT", "ttft_p99": "P99 TTFT", "slo": "SLO attainment"}


def _gain(metric: str, e: Interval) -> str:
    unit = " pts" if HIGHER_IS_BETTER[metric] else "%"
    if math.isnan(e.low):
        return f"{100 * e.point:+.1f}{unit}"
    return f"{100 * e.point:+.1f}{unit} [{100 * e.low:+.1f}, {100 * e.high:+.1f}]"


def _diff(e: Interval) -> str:
    return (f"{100 * e.point:+.1f} pts" + ("" if math.isnan(e.low) else
                                            f" [{100 * e.low:+.1f}, {100 * e.high:+.1f}]"))


def claim_sentence(c) -> str:
    """One claim (a claims.Claim) in full: both gains, their difference (and with the
    draws), the verdicts."""
    name = f"{display_name(c.scheduler)} vs {display_name(c.baseline)}, {METRIC_NAMES[c.metric]}"
    return (f"{name}: packets {_gain(c.metric, c.packets)} ({c.on_packets}), flow "
            f"{_gain(c.metric, c.flow)}; flow - packets {_diff(c.difference)}"
            + ("" if c.draws is None else
               f", the flow model's mean over its draws with the draws {_diff(c.draws)}")
            + f", n={c.n}: {c.verdict}"
            + ("" if c.network is None else
               f"; at the packets' decisions (replay - packets) {_diff(c.network)}: "
               f"{c.network_verdict}"))


def ttft_sentence(iv: Interval, verdict: Verdict, target: float = targets.TTFT_ERROR,
                  min_n: int = targets.MIN_REQUESTS) -> str:
    """One scheduler's mean-TTFT verdict in words."""
    if (iv.n or 0) < min_n or iv.point != iv.point:
        return f"inconclusive: n too small ({iv.n} requests, need {min_n})"
    ci = f"CI {100 * iv.low:+.1f}% .. {100 * iv.high:+.1f}%, n={iv.n}"
    if verdict == Verdict.AGREE:
        return f"agree within {100 * target:.0f}% ({100 * iv.point:+.1f}%, {ci})"
    if verdict == Verdict.DISAGREE:
        return f"disagree: {100 * iv.point:+.1f}% ({ci})"
    return (f"inconclusive: {100 * iv.point:+.1f}% ({ci}) straddles the "
            f"{100 * target:.0f}% target; more seeds narrow it")


def runs_of(t: dict) -> str:
    """How many runs of how many cells the floor compared: "4 runs of one seed"."""
    cells = t.get("packets_cells") or 1
    return f"{t['packets_runs']} runs of {'one seed' if cells == 1 else f'{cells} cells'}"


def reach_sentence(t: dict, which: str, verdict: Verdict) -> str:
    """A per-transfer target's verdict (decision.reach) in words, naming what would
    change it."""
    target_key, replay_key, floor_key, ci_key = REACH_KEYS[which]
    target, got = t[target_key], t[replay_key]
    if verdict == Verdict.NOT_JUDGED:
        return "nothing to judge" if which == "engines" else "no transfer above the validity floor"
    if verdict == Verdict.MET:
        return f"met ({100 * got:.1f}% <= {100 * target:.0f}%)"
    if verdict == Verdict.FLOOR_NOT_MEASURED:
        return (f"missed ({100 * got:.1f}%); whether any model could meet it here is not "
                "measured: --repeats 3 runs the first seed again on packets and says"
                + (" (on ns-3, every scheduler again)" if which == "engines" else ""))
    floor, ci = t.get(floor_key), t.get(ci_key)
    about = (f"packets deciding again repeat to a median of {100 * floor:.1f}%"
             if which == "engines" else f"packets repeat to a {which} of {100 * floor:.1f}%")
    if ci and ci[0] == ci[0]:
        about += f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
    if verdict == Verdict.OUT_OF_REACH:
        why = ("no model deciding for itself can be judged to meet it here: a shift of under "
               "a frame moves what the schedulers read and so where they place (the claims "
               "and the ranking, judged over seeds, are what a model can be held to)"
               if which == "engines" else
               "no deterministic model can be judged to meet it here; runs that repeat would "
               "(more packets in flight per stream: a larger emulation.scale or ns3.scale)")
        return (f"missed ({100 * got:.1f}%) and out of reach on this fabric: {about}, over "
                f"the {100 * target:.0f}% target, so {why}")
    if verdict == Verdict.WITHIN_REACH:
        return (f"missed ({100 * got:.1f}%) within reach: {about}, under "
                f"the {100 * target:.0f}% target: the model's own error")
    return (f"missed ({100 * got:.1f}%); {about}, an interval that holds "
            f"{100 * target:.0f}%: more repeat runs or a longer window "
            "(--repeats N, workload.measure_s: more transfers offered alike) "
            "say whether a model could meet it here")


def replay_lines(doc: dict) -> list[str]:
    """ns-3's replay of emulated runs (validate/packets_replay.judge's document) in lines."""
    def pct(x: float) -> str:
        return f"{100 * x:.1f}%"

    def spread(e: dict) -> str:
        if not e.get("n"):
            return "none"
        med, p90 = e["median_abs_error"], e["p90_abs_error"]
        return (f"n={e['n']}: median |error| {pct(med['point'])} [{pct(med['low'])}, "
                f"{pct(med['high'])}], p90 {pct(p90['point'])} [{pct(p90['low'])}, "
                f"{pct(p90['high'])}], bias {100 * e['bias']:+.1f}%")

    def biases(by: dict) -> str:
        return ", ".join(f"{k}: {100 * v['mean_error']:+.1f}% (n={v['n']})" for k, v in by.items())

    o = doc["overall"]
    t = o["timeouts"]
    lines = [f"ns-3 replaying the emulation's transfers: {len(doc['runs'])} run folder(s), "
             f"{o['transfers']} whole transfers ({o['lost_on_ns3']} shards never ended on ns-3)",
             f"  above the validity floor, {spread(o['above_floor'])}",
             f"  every transfer, {spread(o['all'])}",
             f"  bias by tier: {biases(o['by_tier'])}",
             f"  bias by competitors in flight on its links at its start: "
             f"{biases(o['by_competitors'])}",
             f"  retransmission timeouts, shard by shard (n={t['n']}): emulation "
             f"{pct(t['emulation_share'])}, ns-3 {pct(t['ns3_share'])}, one engine only "
             f"{pct(t['one_engine_share'])}"]
    floor = doc.get("floor")
    if floor:
        same = floor.get("replay_same_transfers") or {}
        lines.append(f"  the emulation's own floor ({floor['runs']} runs, n={floor['n']}): "
                     f"median |error| {pct(floor['median_abs_error'])}, p90 "
                     f"{pct(floor['p90_abs_error'])} [{pct(floor['p90_ci'][0])}, "
                     f"{pct(floor['p90_ci'][1])}]; ns-3 on those transfers: median "
                     f"{pct(same.get('median_abs_error', math.nan))}, p90 "
                     f"{pct(same.get('p90_abs_error', math.nan))}")
    for run in doc["runs"]:
        above = run.get("above_floor") or {}
        lines.append(f"  {run['folder']}: {len(run['cells'])} cells"
                     + (f", median {pct(above['median_abs_error']['point'])}, p90 "
                        f"{pct(above['p90_abs_error']['point'])}" if above.get("n") else "")
                     + (f"; left out: {'; '.join(run['skipped'])}" if run["skipped"] else ""))
    return lines
