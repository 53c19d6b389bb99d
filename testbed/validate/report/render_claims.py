"""The report's section on the paper's claims: gains per scheduler on both engines, the
ranking's probability, and for a sequential validation its plan, looks and stop."""

from __future__ import annotations

from testbed.model.extensions.plugins import display_name
from testbed.validate.judging.decision import HIGHER_IS_BETTER
from testbed.validate.judging.sequential import need_words, seeds_for_draws
from testbed.validate.judging.targets import GAIN_TOLERANCE
from testbed.validate.judging.words import METRIC_NAMES


def _est(metric: str, e: dict) -> str:
    unit = " pts" if HIGHER_IS_BETTER[metric] else "%"
    if e["point"] is None or e["point"] != e["point"]:
        return "-"
    if e["low"] is None or e["low"] != e["low"]:
        return f"{100 * e['point']:+.1f}{unit}"
    return f"{100 * e['point']:+.1f}{unit} [{100 * e['low']:+.1f}, {100 * e['high']:+.1f}]"


def _diff(e: dict) -> str:
    if e["low"] is None or e["low"] != e["low"]:
        return f"{100 * e['point']:+.1f} pts"
    return f"{100 * e['point']:+.1f} pts [{100 * e['low']:+.1f}, {100 * e['high']:+.1f}]"


def claim_lines(doc: dict) -> list[str]:
    gains = doc.get("claims") or {}
    seq = doc.get("sequential")
    level = 100 * (seq["level"] if seq else 0.95)
    lines = ["## The paper's claims: each scheduler's gain, on packets and in the flow model",
             "",
             "A gain is measured on the *same requests* in every run of a point (requests "
             "paired across schedulers and engines; faithful packet runs only; the flow "
             "model with its TCP terms). TTFT gains are relative (negative: faster than the "
             "baseline); SLO gains are in points of attainment. *On packets*: the gain "
             "holds (its interval is entirely on the better side), is reversed, or is "
             "unresolved. *Verdict*: the flow model's gain minus the packets' agrees when its "
             f"whole interval lies within +-{100 * GAIN_TOLERANCE:.0f} points, disagrees when "
             "it lies entirely outside, and is inconclusive otherwise. Intervals: block "
             f"bootstrap over requests in arrival order, {level:.1f}% "
             + ("(the last look's level of the sequential plan below)." if seq else "(percentile).")
             + " *With the draws*: a mean-TTFT gain also moves when the same requests meet "
             "other draws (the schedulers' tie-breaks), and each packet run is one draw; "
             "that interval takes the flow model's gain as its mean over the draws below "
             "(the point moves by it), adds their spread for the packets' one draw and the "
             "flow model's mean, and the mean-TTFT verdict is taken on it."
             + " docs/validation.md (\"The statistics of a verdict\") explains each step. "
             "*At the packets' decisions*: the same test on the replay's gain minus the "
             "packets' (the flow model fed exactly the transfers the packets carried): "
             "the network model's error on the gain, without the schedulers' diverging "
             "decisions.", ""]
    if not gains or not any(by["claims"] for by in gains.values()):
        return lines + ["No claim could be judged: no seed has a faithful packet run of every "
                        "scheduler (see the fidelity section); more seeds, or a higher "
                        "emulation.time_dilation, would give one.", ""] + _sequential_lines(seq)
    for point, by in gains.items():
        lines += [f"### {point}: {by['n']} paired requests", "",
                  "| claim | metric | packets | on packets | flow model | flow - packets | "
                  "with the draws | verdict | at the packets' decisions: replay - packets | "
                  "verdict |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for c in by["claims"]:
            verdict = f"**{c['verdict']}**" if c["metric"] == "ttft_mean" else c["verdict"]
            net, drawn = c.get("network"), c.get("difference_with_draws")
            lines.append(f"| {display_name(c['scheduler'])} vs {display_name(c['baseline'])} | "
                         f"{METRIC_NAMES[c['metric']]} | {_est(c['metric'], c['packets'])} | "
                         f"{c['on_packets']} | {_est(c['metric'], c['flow'])} | "
                         f"{_diff(c['difference'])} | {_diff(drawn) if drawn else '-'} | "
                         f"{verdict} | "
                         f"{_diff(net) if net else '-'} | "
                         f"{c.get('network_verdict') or '-'} |")
        lines += _draw_lines(doc.get("trajectory", {}).get(point))
        r = by.get("ranking")
        if r:
            lines += ["", f"Ranking by mean TTFT: packets "
                      f"{' < '.join(display_name(s) for s in r['packets'])} (kept in "
                      f"{100 * r['p_packets_order']:.0f}% of resamples), flow model "
                      f"{' < '.join(display_name(s) for s in r['flow'])} (kept in "
                      f"{100 * r['p_flow_order']:.0f}%); both engines give the same order in "
                      f"{100 * r['p_same_order']:.0f}% of resamples."]
        lines.append("")
    return lines + _sequential_lines(seq)


def _draw_lines(spread: dict | None) -> list[str]:
    """The claims' run-to-run spread in the flow model (validate/judging/trajectory.py)."""
    if not spread:
        return []
    first = next(iter(spread.values()))
    parts = []
    for claim, t in spread.items():
        s, b = claim.split(" vs ")
        parts.append(f"{display_name(s)} vs {display_name(b)} sd {100 * t['sd']:.1f} points "
                     f"({100 * t['low']:+.1f}% .. {100 * t['high']:+.1f}%)")
    return ["", f"One run is one draw: the flow model on the same requests again, only its "
            f"own random draws changed (the schedulers' tie-breaks, any random path choice; "
            f"{first['draws']} draws of each of "
            f"{first['seeds']} seed(s)), moves each mean-TTFT gain by: " + "; ".join(parts)
            + ". The intervals *flow - packets* resample requests, not draws; the mean-TTFT "
            "verdicts take the flow model's gain as its mean over these draws and add their "
            "spread for each engine (the packets' one draw a seed, the flow model's mean; "
            "*with the draws*; docs/validation.md, \"One run is one draw\")."] \
        + _seeds_needed(spread)


def _seeds_needed(spread: dict) -> list[str]:
    """How many seeds the draws alone need before an agreement within the tolerance can
    be shown: the draws' part of the widened half-width (claims.draws_variance) under
    GAIN_TOLERANCE."""
    worst = max((t["sd"] for t in spread.values() if t["sd"] == t["sd"]), default=0.0)
    if worst <= 0:
        return []
    need = seeds_for_draws(worst, GAIN_TOLERANCE, 0.95)
    return ["", f"With a draw sd of {100 * worst:.1f} points the draws alone keep a "
            f"{100 * GAIN_TOLERANCE:.0f}-point agreement out of reach below {need} seeds per "
            "scheduler (each seed a packet run), however many requests each holds."]


def _ns3_rounds_lines(seq: dict) -> list[str]:
    """The plan and looks of a validation on ns-3 (validate/pipelines/ns3_rounds.py)."""
    lines = ["### Plan and stop", "",
             f"Seeds in doubling rounds on ns-3 within {seq['budget_s'] / 60:.0f} min: looks "
             f"planned at {', '.join(map(str, seq['planned_seeds']))} seeds. Stopped after "
             f"{len(seq['looks'])} look(s): {seq['reason']}.", "",
             "| look | seeds | level | primary claims: flow - packets | verdicts | wall |",
             "|---|---|---|---|---|---|"]
    for look in seq["looks"]:
        lines.append(f"| {look['look']} | {look['seeds']} | {_look_claims(look)} | "
                     f"{look['wall_s'] / 60:.1f} min |")
    return lines + [""]


def _look_claims(look: dict) -> str:
    """A look's level, its primary claims' differences and their verdicts (table cells)."""
    diffs = "; ".join(f"{display_name(c['scheduler'])} vs {display_name(c['baseline'])} "
                      f"{_diff(c['difference'])}" for c in look["claims"])
    return (f"{100 * look['level']:.2f}% | {diffs or '-'} | "
            f"{', '.join(c['verdict'] for c in look['claims']) or '-'}")


def _sequential_lines(seq: dict | None) -> list[str]:
    if not seq:
        return []
    if seq.get("engine") == "ns3":
        return _ns3_rounds_lines(seq)
    p = seq["plan"]
    lines = ["### Plan and stop", "",
             f"Asked: half-width {100 * p['target_half_width']:.1f} points on each primary "
             f"claim within {p['budget_s']:.0f} s. Plan ({p['limited_by']}): up to "
             f"{p['rounds']} round(s) of {p['window_s']:.0f} s measurement each (the target "
             f"{need_words(p)}, from the flow-model pilot); expected "
             f"{p['expected_wall_s']:.0f} s wall. Stopped after {len(seq['looks'])} round(s): "
             f"{seq['reason']}. Took {seq['wall_s']:.0f} s"
             + (f" ({100 * (seq['wall_s'] / seq['predicted_wall_s'] - 1):+.0f}% against the "
                f"{seq['predicted_wall_s']:.0f} s predicted for the rounds run)."
                if seq.get("predicted_wall_s") else "."), "",
             "| look | seed | paired requests | level | primary claims: flow - packets | "
             "verdicts |", "|---|---|---|---|---|---|"]
    for look in seq["looks"]:
        lines.append(f"| {look['look']} | {look['seed']} | {look['n']} | {_look_claims(look)} |")
    return lines + [""]
