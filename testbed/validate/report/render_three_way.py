"""The report's section on ns-3 against the emulation (a validation on both packet
engines): does ns-3 stand in for Linux TCP on this fabric, per claim and per transfer."""

from __future__ import annotations

import os
from pathlib import Path

from testbed.model.extensions.plugins import display_name
from testbed.validate.report.answer import verdict_interval

METRIC_WORDS = {"ttft_mean": "mean TTFT", "ttft_p99": "P99 TTFT", "slo": "SLO attainment"}


def _pct(x) -> str:
    return "-" if x is None or x != x else f"{100 * x:+.1f}%"


def _pts(e: dict) -> str:
    if e["point"] is None or e["point"] != e["point"]:
        return "-"
    if e["low"] is None or e["low"] != e["low"]:
        return f"{100 * e['point']:+.1f}"
    return f"{100 * e['point']:+.1f} [{100 * e['low']:+.1f}, {100 * e['high']:+.1f}]"


def _transfers(name: str, s: dict) -> list[str]:
    if not s.get("n"):
        return [f"| {name} | all | 0 | - | - | - |"]
    rows = [("all", s)] + [(f"tier {t}", v) for t, v in s.get("by_tier", {}).items()]
    return [f"| {name} | {where} | {v['n']} | {100 * v['median_abs_error']:.1f}% | "
            f"{100 * v['p90_abs_error']:.1f}% | {_pct(v['mean_error'])} |"
            for where, v in rows if v["n"]]


def three_way_lines(doc: dict, folder: Path) -> list[str]:
    tw = doc.get("three_way")
    if not tw:
        return []
    stand = tw["stand_in"]
    seeds = ", ".join(map(str, stand["seeds"])) or "none"
    theirs = Path(tw["folders"]["ns3_validation"])
    link = os.path.relpath(theirs / "report.md", folder)
    lines = ["## ns-3 against the emulation (does ns-3 stand in for Linux TCP?)", "",
             f"ns-3 ran the emulation's own cells and seeds ({seeds}) at the emulation's "
             "scale: once at the emulation's placements (the network alone: the verdicts "
             "below) and once deciding for itself (each engine its own draw of the "
             "decisions: the last column). The gains are paired by request as the flow "
             "model's are; a claim agrees when ns-3's gain minus the emulation's lies "
             "within +-5 points. Overall: "
             f"**{stand['verdict']}**. The flow model against ns-3, on ns-3's own seeds, is "
             f"a validation of its own: [its report]({link}).", "",
             "| point | claim | metric | emulation | ns-3 | ns-3 - emulation [95% CI], pts | "
             "verdict | deciding for itself: ns-3 - emulation, verdict |",
             "|---|---|---|---|---|---|---|---|"]
    deciding = {(p, c["scheduler"], c["baseline"], c["metric"]): c
                for p, by in stand.get("claims_deciding", {}).items() for c in by["claims"]}
    for point, by in stand["claims"].items():
        for c in by["claims"]:
            d = deciding.get((point, c["scheduler"], c["baseline"], c["metric"]))
            other = f"{_pts(d['difference'])}, {d['verdict']}" if d else "-"
            lines.append(f"| {point} | {display_name(c['scheduler'])} vs "
                         f"{display_name(c['baseline'])} | {METRIC_WORDS[c['metric']]} | "
                         f"{_pct(c['packets']['point'])} | {_pct(c['flow']['point'])} | "
                         f"{_pts(verdict_interval(c))} | {c['verdict']} | {other} |")
    lines += ["", "Whole transfers, ns-3 against the emulation ((ns-3 - emulation) / "
              "emulation):", "",
              "| ns-3 | where | n | median abs | p90 abs | mean (bias) |", "|---|---|---|---|---|---|",
              *_transfers("at the emulation's placements", stand["transfers_forced"]),
              *_transfers("deciding for itself", stand["transfers_deciding"]), ""]
    for point, by in stand["ttft_verdicts"].items():
        for sched, v in by.items():
            lines.append(f"- {point} {display_name(sched)}, mean TTFT: {v['sentence']}")
    for point, r in stand["seed_rankings"].items():
        lines.append(f"- {point}: the same ranking in {r['same']} of {r['seeds']} seed(s)")
    if stand["excluded_runs"]:
        lines.append(f"- left out (unfaithful emulated runs): {', '.join(stand['excluded_runs'])}")
    return lines + [""]
