"""What a validation says in the end (pure): the acceptance figures measured against
their targets, the primary claims counted, and the lines `testbed validate` prints last."""

from __future__ import annotations

from testbed.model.extensions.plugins import display_name
from testbed.validate.judging import claims, decision, model_errors, stats
from testbed.validate.judging import targets as goal
from testbed.validate.judging.decision import Verdict
from testbed.validate.judging.words import reach_sentence, runs_of


def with_intervals(pairs) -> dict:
    out = model_errors.error_summary(pairs)
    out["ci"] = stats.error_intervals([p.error for p in pairs])
    return out


def _sequential_line(seq: dict) -> str:
    if seq.get("engine") == "ns3":
        return (f"stopped after {seq['rounds_run']} of {len(seq['planned_seeds'])} planned "
                f"look(s), at {seq['looks'][-1]['seeds'] if seq['looks'] else 0} seeds: "
                f"{seq['reason']}; took {seq.get('wall_s', 0.0) / 60:.1f} min")
    total = seq.get("total_wall_s", seq["wall_s"])
    expected = seq["predicted_wall_s"] + seq["predicted_judge_s"]
    return (f"stopped after {seq['rounds_run']} of {seq['plan']['rounds']} planned round(s): "
            f"{seq['reason']}; took {total / 60:.1f} min, {100 * (total / expected - 1):+.0f}% "
            f"against the {expected / 60:.1f} min expected for those rounds (planned at most "
            f"{seq['plan']['expected_wall_s'] / 60:.1f} min)")


def targets(replay_pairs, engine_pairs, calibrated: dict, verdicts: dict, runs: int,
            unfaithful: int) -> dict:
    """The acceptance figures, measured (never asserted here): the TCP flow model on whole
    transfers above the validity floor, TTFT verdicts from faithful runs."""
    replay = with_intervals(replay_pairs)
    engines = model_errors.error_summary(engine_pairs)
    worst_ttft = max((abs(m["ttft_mean_ms_error"]) for d in calibrated.values()
                      for m in d["metrics"] if m["ttft_mean_ms_error"] is not None), default=None)
    # a ranking needs two schedulers compared (faithful runs of both) at every point
    ranked = [d for d in calibrated.values() if len(d["ranking"]["reference"]) >= 2]
    same_rank = all(d["ranking"]["same_order"] for d in ranked) if ranked else None
    kinds = [v["verdict"] for by in verdicts.values() for v in by.values()]
    return {
        "replay_median_abs_transfer_error": replay["median_abs_error"],
        "replay_median_ci": [replay["ci"]["median_abs_error"]["low"],
                             replay["ci"]["median_abs_error"]["high"]],
        "replay_p90_abs_transfer_error": replay["p90_abs_error"],
        "replay_p90_ci": [replay["ci"]["p90_abs_error"]["low"],
                          replay["ci"]["p90_abs_error"]["high"]],
        "engines_median_abs_transfer_error": engines["median_abs_error"],
        "worst_mean_ttft_error": worst_ttft,
        "ttft_verdicts": {k: kinds.count(k) for k in ("agree", "disagree", "inconclusive")},
        "same_ranking": same_rank,
        "runs": runs, "unfaithful_runs": unfaithful,
        "transfer_target": goal.TRANSFER_MEDIAN, "transfer_p90_target": goal.TRANSFER_P90,
        "engines_target": goal.ENGINES_MEDIAN,
        "ttft_target": goal.TTFT_ERROR, "ttft_ci_target": goal.TTFT_CI,
    }


def reach(t: dict, which: str = "p90") -> tuple[Verdict, str]:
    """The replay's median or p90 target, or both engines' median ("engines"), against
    packets' own floor: the verdict (decision.reach) and its sentence."""
    if which == "engines" and not t.get("engines_target"):  # older folders lack it
        t = {**t, "engines_target": goal.ENGINES_MEDIAN}
    verdict = decision.reach(t, which)
    return verdict, reach_sentence(t, which, verdict)


def acceptance(doc: dict) -> dict[str, tuple[Verdict, str]]:
    """The per-transfer and ranking targets of one validation (its comparison.json),
    each (verdict, sentence)."""
    t = doc["targets"]
    ranks = list((doc.get("seed_rankings") or {}).get("tcp", {}).values())
    same, seeds = sum(r["same"] for r in ranks), sum(r["seeds"] for r in ranks)
    verdict = decision.every_seed(same, seeds)
    ranking = (verdict, "no seed with every scheduler faithful" if not seeds else
               f"{same} of {seeds} seeds")
    return {"replay_median": reach(t, "median"), "replay_p90": reach(t, "p90"),
            "engines_median": reach(t, "engines"), "same_ranking": ranking}


def claim_targets(gains: dict) -> dict:
    """The primary claims' verdicts (mean-TTFT gains), counted and in words."""
    primary = [c for by in gains.values() for c in by["claims"] if c["metric"] == claims.PRIMARY]
    kinds = [c["verdict"] for c in primary]
    network = [c["network_verdict"] for c in primary if c.get("network_verdict")]
    return {"gain_verdicts": {k: kinds.count(k) for k in ("agree", "disagree", "inconclusive")},
            "network_gain_verdicts": {k: network.count(k)
                                      for k in ("agree", "disagree", "inconclusive")}
            if network else None,
            "gain_lines": [c["sentence"] for c in primary],
            "ranking_probability": {p: by["ranking"] for p, by in gains.items()
                                    if by["ranking"]}}


def divergence_targets(decisions: dict | None) -> dict:
    """Mean-TTFT verdicts with the packets' placements forced (validate/judging/divergence.py)."""
    if not decisions:
        return {}
    forced = [g["forced"] for by in decisions["ttft"].values() for g in by.values()]
    kinds = [v["verdict"] for v in forced]
    worst = max((abs(v["point"]) for v in forced if v["point"] == v["point"]), default=None)
    return {"forced_ttft_verdicts": {k: kinds.count(k)
                                     for k in ("agree", "disagree", "inconclusive")},
            "forced_worst_mean_ttft_error": worst}


def summary_lines(t: dict, sequential: dict | None = None, judged: dict | None = None,
                  wall_s: float | None = None) -> list[str]:
    """What `testbed validate` prints last: the figures, and whether to trust them."""
    def pct(x) -> str:
        return "-" if x is None or x != x else f"{100 * x:.1f}%"

    v = t["ttft_verdicts"]
    lines = [
        f"per-transfer median |error| (replay, TCP terms, above the validity floor): "
        f"{pct(t['replay_median_abs_transfer_error'])} (95% CI {pct(t['replay_median_ci'][0])}"
        f"-{pct(t['replay_median_ci'][1])}), p90 {pct(t['replay_p90_abs_transfer_error'])}; "
        f"mean TTFT: {v['agree']} agree, {v['disagree']} disagree, {v['inconclusive']} "
        f"inconclusive; worst difference {pct(t['worst_mean_ttft_error'])}; same ranking: "
        f"{'-' if t['same_ranking'] is None else ('yes' if t['same_ranking'] else 'no')}"]
    if t.get("packets_p90_abs_transfer_error") is not None:
        lines.append(f"packets against packets ({runs_of(t)}, the "
                     f"floor for any flow model): median {pct(t['packets_median_abs_transfer_error'])}"
                     f", p90 {pct(t['packets_p90_abs_transfer_error'])}; the replay on the same "
                     f"transfers: p90 {pct(t['replay_same_p90_abs_transfer_error'])}")
    for which in ("median", "p90"):
        kind, sentence = reach(t, which)
        if kind not in (Verdict.MET, Verdict.NOT_JUDGED):
            lines.append(f"replay {which} target: {sentence}")
    if t.get("packets_engines_median_abs_transfer_error") is not None:
        kind, sentence = reach(t, "engines")
        if kind != Verdict.MET:
            lines.append(f"both engines' median target: {sentence}")
    f = t.get("forced_ttft_verdicts")
    if f:
        lines.append(f"mean TTFT at the packets' placements (the flow model forced to them: "
                     f"scheduling divergence removed): {f['agree']} agree, {f['disagree']} "
                     f"disagree, {f['inconclusive']} inconclusive; worst difference "
                     f"{pct(t['forced_worst_mean_ttft_error'])}")
    g = t.get("gain_verdicts")
    if g is not None and not any(g.values()):
        lines.append("gains: no claim judged (no seed with a faithful packet run of every "
                     "scheduler; more seeds or a higher emulation.time_dilation would give one)")
    elif g is not None:
        lines.append(f"gains (mean TTFT, flow model vs packets within "
                     f"{100 * goal.GAIN_TOLERANCE:.0f} points): {g['agree']} agree, "
                     f"{g['disagree']} disagree, {g['inconclusive']} inconclusive")
        n = t.get("network_gain_verdicts")
        if n:
            lines.append(f"gains at the packets' own decisions (replay vs packets, same test): "
                         f"{n['agree']} agree, {n['disagree']} disagree, "
                         f"{n['inconclusive']} inconclusive")
        lines += [f"  {line}" for line in t["gain_lines"]]
        for point, r in t["ranking_probability"].items():
            lines.append(f"  ranking ({point}): packets "
                         f"{' < '.join(display_name(s) for s in r['packets'])} "
                         f"(P={r['p_packets_order']:.2f}), flow "
                         f"{' < '.join(display_name(s) for s in r['flow'])} "
                         f"(P={r['p_flow_order']:.2f}); same order in "
                         f"{100 * r['p_same_order']:.0f}% of resamples")
    if sequential:
        lines.append(_sequential_line(sequential))
    if judged and wall_s:
        lines.append(f"judged {judged['measured_requests']} requests measured on faithful "
                     f"packet runs ({judged['paired_requests']} paired into the claims) in "
                     f"{wall_s / 60:.1f} min: {60 * judged['measured_requests'] / wall_s:.0f} "
                     "per wall-minute")
    bad = t["unfaithful_runs"]
    if t.get("packets") == "ns3":
        lines.append(f"packets: {t['runs']} ns-3 runs (simulated: no machine to fall behind)")
    elif bad:
        lines.append(f"UNFAITHFUL: {bad} of {t['runs']} emulated runs were flagged by the "
                     "fidelity monitor and left out of the TTFT verdicts (see the report); "
                     "re-run at a higher emulation.time_dilation")
    else:
        lines.append(f"all {t['runs']} emulated runs faithful")
    return lines
