"""The answer a validation prints last (pure words): whether the paper's claims hold on
packets and whether the flow model gets their gains right, in a few short lines.

The decisions are the claims' own (claims.py: on packets, verdict); this module only
counts and lays them out. Everything else a validation measured is in its report and in
`testbed validate --verbose` (summary.summary_lines)."""

from __future__ import annotations

import math

from testbed.model.extensions.plugins import display_name
from testbed.validate.judging.claims import PRIMARY
from testbed.validate.judging.sequential import seeds_to_settle
from testbed.validate.judging.targets import GAIN_TOLERANCE

WIDTH = 100  # no line of the answer is longer (the report's path aside)
_NAME, _PACKETS, _FLOW, _DIFF = 20, 13, 9, 24


def _num(x) -> bool:
    return x is not None and x == x


def _pct(x) -> str:
    return f"{100 * x:+.1f}%" if _num(x) else "-"


def verdict_interval(claim: dict) -> dict:
    """The interval a claim's verdict was taken on: with the draws where it was widened."""
    return claim.get("difference_with_draws") or claim["difference"]


def _diff(e: dict) -> str:
    if not _num(e["point"]):
        return "-"
    if not _num(e["low"]):
        return f"{100 * e['point']:+.1f} pts"
    return f"{100 * e['point']:+.1f} [{100 * e['low']:+.1f}, {100 * e['high']:+.1f}] pts"


def primary_claims(doc: dict) -> list[tuple[str, dict]]:
    """(point, claim) of every mean-TTFT gain claim, in the order judged."""
    return [(point, c) for point, by in (doc.get("claims") or {}).items()
            for c in by["claims"] if c["metric"] == PRIMARY]


def _counts(words: list[str], order: tuple[str, ...]) -> str:
    return ", ".join(f"{words.count(w)} {w}" for w in order if words.count(w))


def headline(claims: list[dict]) -> str:
    """The first line: do the claims hold on packets, does the flow model agree (the
    table's rows say which and how)."""
    n = len(claims)
    held = [c["on_packets"] for c in claims].count("holds")
    packets = f"all {n} hold" if held == n else f"{held} of {n} hold"
    flow = _counts([c["verdict"] for c in claims], ("agree", "disagree", "inconclusive"))
    return (f"Claims on packets: {packets}. Flow model within "
            f"{100 * GAIN_TOLERANCE:.0f} pts: {flow}.")


def claim_rows(found: list[tuple[str, dict]]) -> list[tuple[str, str, str, str, str]]:
    """Per claim: its name, the packets' gain and whether it holds, the flow model's gain,
    their difference with the interval the verdict read, and the verdict."""
    several = len({point for point, _ in found}) > 1
    rows = []
    for point, c in found:
        name = f"{display_name(c['scheduler'])} vs {display_name(c['baseline'])}"
        rows.append((f"{point} {name}" if several else name,
                     f"{_pct(c['packets']['point'])} {c['on_packets']}",
                     _pct(c["flow"]["point"]), _diff(verdict_interval(c)), c["verdict"]))
    return rows


def ci(level: float) -> str:
    """'95% CI'; a level that would round to 100% keeps a decimal ('99.6% CI')."""
    return f"{100 * level:.0f}% CI" if round(100 * level) < 100 else f"{100 * level:.1f}% CI"


def header(level: float) -> tuple[str, str, str, str, str]:
    return ("claim (mean TTFT)", "packets", "flow",
            f"flow - packets [{ci(level)}]", "verdict")


def table(found: list[tuple[str, dict]], level: float) -> list[str]:
    """The claims' table in fixed columns, for the terminal."""
    return [f"{a:<{_NAME}}{b:>{_PACKETS}}{c:>{_FLOW}}  {d:<{_DIFF}} {e}"
            for a, b, c, d, e in [header(level), *claim_rows(found)]]


def markdown_table(found: list[tuple[str, dict]], level: float) -> list[str]:
    """The same table for the report."""
    return ["| " + " | ".join(header(level)) + " |", "|---|---|---|---|---|",
            *("| " + " | ".join(row) + " |" for row in claim_rows(found))]


def _duration(s: float) -> str:
    m = s / 60
    if m < 10:
        return f"{m:.1f} min"
    if m < 90:
        return f"{m:.0f} min"
    return f"{m / 60:.0f} h" if m < 48 * 60 else f"{m / 1440:.0f} days"


def settle_line(claims: list[dict], seeds: int | None, seed_wall_s: float | None,
                segments: int | None = None) -> str | None:
    """What would settle the inconclusive claims: seeds in all, and their time here; past
    the trace's `segments`, how many draws of each that is."""
    open_ = [c for c in claims if c["verdict"] == "inconclusive"]
    if not open_ or not seeds:
        return None
    needs = [seeds_to_settle(verdict_interval(c)["low"], verdict_interval(c)["high"],
                             seeds, GAIN_TOLERANCE) for c in open_]
    if any(n is None for n in needs):
        c = open_[needs.index(None)]
        return (f"To settle: {display_name(c['scheduler'])} vs {display_name(c['baseline'])} "
                f"sits on the {100 * GAIN_TOLERANCE:.0f}-point edge; more seeds alone "
                "would hardly settle it.")
    need = max(max(needs), seeds + 1)
    draws = (f": {math.ceil(need / segments)} draws of {segments} segments"
             if segments and need > segments else "")
    cost = f", {_duration((need - seeds) * seed_wall_s)}" if seed_wall_s else ""
    which = "it" if len(open_) == 1 else f"all {len(open_)}"
    return (f"To settle {which} here: about {need - seeds} more seeds "
            f"(--seeds {need}{draws}){cost}.")


def packets_line(t: dict, judged: dict | None, wall_s: float | None) -> str:
    """Which packets judged, whether they can be trusted, and what they bought."""
    runs, bad = t["runs"], t["unfaithful_runs"]
    if t.get("packets") == "ns3":
        line = f"Packets: {runs} ns-3 runs (deterministic)"
    elif bad:
        return (f"UNFAITHFUL: {bad} of {runs} emulated runs left out of the verdicts; "
                "raise emulation.time_dilation")
    else:
        line = f"Packets: all {runs} emulated runs faithful"
    if judged and wall_s:
        rate = 60 * judged["measured_requests"] / wall_s
        line += (f"; {judged['measured_requests']} requests judged in "
                 f"{_duration(wall_s)} ({rate:.0f} a minute)")
    return line + "."


def _level(doc: dict) -> float:
    seq = doc.get("sequential")
    return seq["level"] if seq else 0.95


def _seed_wall_s(seeds: int | None, wall: dict | None) -> float | None:
    """Wall seconds one more seed cost here: the run's time less what is paid once (the
    calibration, the fabric's start), over its seeds."""
    if not seeds or not wall or not wall.get("total_s"):
        return None
    phases = wall.get("phases", {})
    spent = wall["total_s"] - phases.get("calibration_s", 0.0) - phases.get("fabric_s", 0.0)
    return spent / seeds if spent > 0 and not math.isnan(spent) else None


def answer_lines(doc: dict, wall: dict | None = None, markdown: bool = False) -> list[str]:
    """What `testbed validate` prints after its progress bar (the report's path follows):
    the answer, the claims' table, what would settle the rest, the packets' line.
    `markdown`: the same for the report, the table as a markdown table."""
    if doc.get("three_way"):
        return three_way_lines(doc, wall, markdown)
    found = primary_claims(doc)
    claims = [c for _, c in found]
    judged = doc.get("judged") or {}
    total = wall.get("total_s") if wall else None
    last = packets_line(doc["targets"], judged, total)
    if not claims:
        return ["No claim judged: no seed has a faithful packet run of every scheduler.",
                "More seeds, or a higher emulation.time_dilation, would give one.", last]
    rows = (markdown_table if markdown else table)(found, _level(doc))
    lines = [headline(claims), *([""] if markdown else []), *rows, *([""] if markdown else [])]
    seeds = judged.get("seeds")
    settle = settle_line(claims, seeds, _seed_wall_s(seeds, wall),
                         (doc.get("sequential") or {}).get("segments"))
    tail = ([settle] if settle else []) + [last]
    if markdown:  # paragraphs of their own
        tail = [part for line in tail for part in (line, "")][:-1]
    return lines + tail


_EMU, _NS3, _FLOW3, _DIFF3, _VERDICT, _STAND = 10, 8, 8, 22, 13, 18


def _short(e: dict) -> str:
    """A difference in points with its interval, without the unit (the header says it)."""
    return _diff(e).removesuffix(" pts")


def three_way_rows(tw: dict) -> list[tuple[str, ...]]:
    """Per mean-TTFT claim: the emulation's gain, ns-3's, the flow model's, flow - ns-3
    with its verdict (the ns-3 validation's seeds), ns-3 - emulation with its verdict
    (the emulation's seeds)."""
    found = primary_claims(tw["flow_vs_ns3"])
    stand = {(p, c["scheduler"], c["baseline"]): c for p, c in primary_claims(tw["stand_in"])}
    several = len({point for point, _ in found}) > 1
    rows = []
    for point, c in found:
        name = f"{display_name(c['scheduler'])} vs {display_name(c['baseline'])}"
        s = stand.get((point, c["scheduler"], c["baseline"]))
        emu = _pct(s["packets"]["point"]) if s else "-"
        other = (f"{round(100 * s['difference']['point'], 1) + 0.0:+.1f} {s['verdict']}"
                 if s and _num(s["difference"]["point"]) else "-")
        rows.append((f"{point} {name}" if several else name, emu, _pct(c["packets"]["point"]),
                     _pct(c["flow"]["point"]), _short(verdict_interval(c)), c["verdict"], other))
    return rows


def _three_header(level: float) -> tuple[str, ...]:
    return ("claim (mean TTFT)", "emulation", "ns-3", "flow",
            f"flow - ns-3 [{ci(level)}]", "verdict", "ns-3 - emulation")


def _holds(claims: list[dict]) -> str:
    return f"{[c['on_packets'] for c in claims].count('holds')} of {len(claims)}"


def three_way_lines(doc: dict, wall: dict | None, markdown: bool = False) -> list[str]:
    """The answer of a validation on both packet engines (at most 7 lines: the report's
    path follows): the claims on each, the flow model against ns-3, and ns-3 against the
    emulation (does it stand in for Linux TCP)."""
    tw = doc["three_way"]
    flow, stand = tw["flow_vs_ns3"], tw["stand_in"]
    ours = [c for _, c in primary_claims(flow)]
    emu = [c for _, c in primary_claims(stand)]
    words = _counts([c["verdict"] for c in ours], ("agree", "disagree", "inconclusive"))
    head = (f"Claims on packets: emulation {_holds(emu)} hold, ns-3 {_holds(ours)}. Flow vs "
            f"ns-3 within {100 * GAIN_TOLERANCE:.0f} pts: {words or 'none judged'}.")
    level = (flow.get("sequential") or {}).get("level", 0.95)
    rows = [_three_header(level), *three_way_rows(tw)]
    if markdown:
        table_ = ["| " + " | ".join(rows[0]) + " |", "|---" * len(rows[0]) + "|",
                  *("| " + " | ".join(r) + " |" for r in rows[1:])]
    else:
        table_ = [f"{a:<{_NAME - 1}}{b:>{_EMU}}{c:>{_NS3}}{d:>{_FLOW3}}  {e:<{_DIFF3}} "
                  f"{f:<{_VERDICT}}{g}" for a, b, c, d, e, f, g in rows]
    judged = flow.get("judged") or {}
    settle = settle_line(ours, judged.get("seeds"),
                         _seed_wall_s(judged.get("seeds"), flow.get("wall")),
                         (flow.get("sequential") or {}).get("segments"))
    twin = (tw.get("emulation_seeds") or {}).get("settle")
    tail = ([settle or twin] if settle or twin else []) + [
        stand_in_line(doc["targets"], stand, emu, tw.get("replay"))]
    if markdown:
        tail = [part for line in tail for part in (line, "")][:-1]
    return [head, *([""] if markdown else []), *table_, *([""] if markdown else []), *tail]


def stand_in_line(t: dict, stand: dict, claims: list[dict], replay: dict | None = None) -> str:
    """ns-3 against the emulation: on how many seeds, whether the emulation's runs can be
    trusted, the claims' verdicts and whole transfers (ns-3 replaying the emulation's own,
    above the validity floor; before replays, at the emulation's placements)."""
    seeds = len(stand["seeds"])
    runs = (f"UNFAITHFUL: {t['unfaithful_runs']} of {t['runs']} runs left out"
            if t["unfaithful_runs"] else f"{t['runs']} runs faithful")
    verdicts = _counts([c["verdict"] for c in claims], ("agree", "disagree", "inconclusive"))
    forced = stand["transfers_forced"]
    above = ((replay or {}).get("overall") or {}).get("above_floor") or {}
    if above.get("n"):
        transfers = (f"replayed {100 * above['median_abs_error']['point']:.1f}% "
                     f"(p90 {100 * above['p90_abs_error']['point']:.1f}%)")
    else:
        transfers = (f"per transfer {100 * forced['median_abs_error']:.1f}% "
                     f"(p90 {100 * forced['p90_abs_error']:.1f}%)" if forced.get("n")
                     else "no transfer paired")
    return (f"ns-3 vs emulation ({seeds} seed{'s' * (seeds != 1)}; {runs}): "
            f"{verdicts or 'none judged'}; {transfers}.")
