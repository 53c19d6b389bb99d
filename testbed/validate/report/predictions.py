"""Another simulator's predictions judged against a run's packets: `testbed judge
--predictions FILE RUN`.

FILE is CSV with a header: `cell` (point/scheduler/seed<k>, as `testbed export-workload`
names it), `request` (its id), `ttft_s` (the predicted time to first token, seconds from
arrival) and optionally `transfer_s` (the predicted time of the request's whole KV
transfer, first shard's start to the slowest shard's end; empty where none). Every cell
named must predict every request the run measured and served in it; cells not named are
not judged. The statistics are validate's own: per scheduler the paired mean-TTFT error
with its bootstrap interval and verdict, the paper's claims (each scheduler's gain over RR
and CLA* on packets and in the predictions, paired by request, within +-5 points) where a
seed has every scheduler, and the whole transfers' errors. Input is checked in full first;
a bad line raises PredictionError naming its line and field, and nothing is written.
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from testbed.inputs import InputError, number, read_csv, read_text
from testbed.validate.judging import model_errors, stats
from testbed.validate.judging.claims import judge_point, pair_requests, served
from testbed.validate.judging.decision import ttft_agreement
from testbed.validate.judging.words import ttft_sentence

REQUIRED = ("cell", "request", "ttft_s")
OPTIONAL = ("transfer_s",)
UNIT_RATIO = 100.0  # a median ratio to the run's own times past this is a units mix-up
MAX_BYTES = 1 << 30  # a prediction a request: a billion-byte file is not one


class PredictionError(InputError):
    """A predictions file that cannot be judged; the message names the line and field."""


@dataclass(frozen=True)
class Predictions:
    ttft: dict[str, dict[str, float]]  # cell -> request -> seconds
    transfer: dict[str, dict[str, float]]  # cell -> request -> seconds (where given)


def _number(where: str, field: str, text: str, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise PredictionError(f"{where}: {field} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise PredictionError(f"{where}: {field} {text!r} is not finite")
    if value < 0 or (positive and value == 0):
        raise PredictionError(f"{where}: {field} {value:g} must be "
                              f"{'positive' if positive else 'at least 0'} (seconds)")
    return value


def parse(path: Path, cells: dict[str, dict[str, dict]]) -> Predictions:
    """The predictions in `path`, checked against the run's cells (cell -> request id ->
    requests.csv row)."""
    name = Path(path).name
    try:
        text = read_text(path, MAX_BYTES)
    except InputError as exc:
        raise PredictionError(str(exc)) from None
    reader = csv.DictReader(text.splitlines())
    header = reader.fieldnames or []
    for field in header:
        if field not in REQUIRED + OPTIONAL:
            hint = " (times are seconds: ttft_s, transfer_s)" if field.endswith("_ms") else ""
            raise PredictionError(f"{name}:1: unknown column {field!r}{hint}; the columns "
                                  f"are {', '.join(REQUIRED + OPTIONAL)}")
    for field in REQUIRED:
        if field not in header:
            raise PredictionError(f"{name}:1: column {field!r} missing")
    ttft: dict[str, dict[str, float]] = {}
    transfer: dict[str, dict[str, float]] = {}
    for line, row in enumerate(reader, start=2):
        where = f"{name}:{line}"
        cell, rid = (row.get("cell") or "").strip(), (row.get("request") or "").strip()
        if cell not in cells:
            raise PredictionError(f"{where}: cell {cell!r} is not a cell of this run "
                                  f"(e.g. {next(iter(cells))})")
        if rid not in cells[cell]:
            raise PredictionError(f"{where}: request {rid!r} is not in cell {cell}")
        if rid in ttft.get(cell, {}):
            raise PredictionError(f"{where}: request {rid!r} of cell {cell} predicted twice")
        ttft.setdefault(cell, {})[rid] = _number(where, "ttft_s", row["ttft_s"] or "", False)
        if (row.get("transfer_s") or "").strip():
            transfer.setdefault(cell, {})[rid] = _number(where, "transfer_s",
                                                         row["transfer_s"], True)
    if not ttft:
        raise PredictionError(f"{name}: no prediction in it")
    for cell, got in ttft.items():
        want = [rid for rid, r in cells[cell].items() if _judged(r)]
        missing = [rid for rid in want if rid not in got]
        if missing:
            raise PredictionError(f"{name}: cell {cell}: {len(missing)} measured request(s) "
                                  f"have no ttft_s (first: {missing[0]})")
    out = Predictions(ttft, transfer)
    _check_units(name, out, cells)
    return out


def _judged(row: dict) -> bool:
    return str(row.get("measured")).lower() in ("true", "1") and served(row)


def _check_units(name: str, p: Predictions, cells: dict[str, dict[str, dict]]) -> None:
    """Times a factor of 100 or more from the run's own in the median: a units mix-up."""
    ratios = [v / float(cells[c][r]["ttft"]) for c, got in p.ttft.items()
              for r, v in got.items() if _judged(cells[c][r]) and float(cells[c][r]["ttft"]) > 0]
    _ratio_check(name, "ttft_s", ratios)
    durations = {}
    for c, got in p.transfer.items():
        for r, v in got.items():
            start, end = cells[c][r].get("transfer_start"), cells[c][r].get("transfer_end")
            if start not in (None, "") and end not in (None, "") and float(end) > float(start):
                durations.setdefault("x", []).append(v / (float(end) - float(start)))
    _ratio_check(name, "transfer_s", durations.get("x", []))


def _ratio_check(name: str, field: str, ratios: list[float]) -> None:
    if not ratios or statistics.median(ratios) == 0:
        return
    mid = statistics.median(ratios)
    if mid > UNIT_RATIO or mid < 1 / UNIT_RATIO:
        raise PredictionError(
            f"{name}: {field}: the predictions are {mid:.3g}x the run's own times in the "
            f"median; give seconds ({'milliseconds?' if mid > 1 else 'a unit too large?'})")


def run_cells(folder: Path) -> dict[str, dict[str, dict]]:
    """cell key -> request id -> its requests.csv row, of a run folder."""
    out = {}
    for cell in sorted((folder / "cells").glob("*/*/seed*")):
        rows = read_csv(cell / "requests.csv", ("id", "ttft", "measured"))
        for line, r in enumerate(rows, start=2):
            for field in ("ttft", "transfer_start", "transfer_end"):
                if r.get(field) not in (None, ""):
                    number(r[field], f"{cell / 'requests.csv'}:{line}: {field}")
        out[cell.relative_to(folder / "cells").as_posix()] = {str(r["id"]): r for r in rows}
    if not out:
        raise InputError(f"{folder}: no cells/<point>/<scheduler>/seed*/ to judge against")
    return out


def judged_rows(rows: dict[str, dict], ttft: dict[str, float]) -> list[dict]:
    """A cell's requests with the predicted TTFT (and the SLO met by it) in place."""
    out = []
    for rid, r in rows.items():
        if rid in ttft:
            slo = r.get("slo_s")
            met = slo not in (None, "") and ttft[rid] <= float(slo)
            out.append({**r, "ttft": ttft[rid], "slo_met": met})
    return out


def judge(folder: Path, p: Predictions, cells: dict[str, dict[str, dict]]) -> dict:
    """The predictions against the run: TTFT per scheduler, the claims, the transfers."""
    ttft: dict[str, dict] = {}
    runs: dict[str, dict] = {}
    for cell, got in p.ttft.items():
        point, sched, seed = cell.split("/")
        mine = [cells[cell][rid] for rid in got if _judged(cells[cell][rid])]
        ref = [float(r["ttft"]) for r in mine]
        mod = [got[str(r["id"])] for r in mine]
        acc = ttft.setdefault(point, {}).setdefault(sched, ([], []))
        acc[0].extend(ref)
        acc[1].extend(mod)
        seed_k = int(seed.removeprefix("seed"))
        runs.setdefault(point, {})[("packets", sched, seed_k)] = list(cells[cell].values())
        runs[point][("flow", sched, seed_k)] = judged_rows(cells[cell], got)
    verdicts = {}
    for point, by in ttft.items():
        verdicts[point] = {}
        for sched, (ref, mod) in sorted(by.items()):
            iv = stats.paired_mean_error(ref, mod)
            v = ttft_agreement(iv)
            verdicts[point][sched] = {**iv.as_dict(), "verdict": v,
                                      "sentence": ttft_sentence(iv, v)}
    claims = {point: judge_point(pair_requests(r)).as_dict() for point, r in runs.items()}
    pairs = []
    for cell, got in p.transfer.items():
        whole = model_errors.whole_transfers(read_csv(folder / "cells" / cell / "transfers.csv"))
        for t in whole:
            if t["request"] in got and float(t["end"]) > float(t["start"]):
                pairs.append(model_errors.TransferPair(t["request"], -1, int(t["tier"]),
                                                  float(t["bytes"]),
                                                  float(t["end"]) - float(t["start"]),
                                                  got[t["request"]]))
    return {"run": str(folder), "cells": sorted(p.ttft), "ttft_verdicts": verdicts,
            "claims": claims, "transfers": model_errors.error_summary(pairs)}


def answer_lines(doc: dict, source: str) -> list[str]:
    """What `testbed judge --predictions` prints: the TTFT and gain verdicts' counts, the
    mean-TTFT claims' table (packets against the predictions) and the transfers."""
    from testbed.validate.report.answer import _counts, claim_rows, primary_claims

    order = ("agree", "disagree", "inconclusive")
    ttft = [v["verdict"] for by in doc["ttft_verdicts"].values() for v in by.values()]
    found = primary_claims(doc)
    gains = _counts([c["verdict"] for _, c in found], order) or "none judged (a seed needs " \
        "every scheduler)"
    lines = [f"Predictions ({source}) vs packets, {len(doc['cells'])} cell(s): mean TTFT "
             f"within 5%: {_counts(ttft, order)}; gains within 5 pts: {gains}."]
    if found:
        lines.append(f"{'claim (mean TTFT)':<20}{'packets':>13}{'predicted':>11}  "
                     f"{'predicted - packets [95% CI]':<30} verdict")
        lines += [f"{a:<20}{b:>13}{c:>11}  {d:<30} {e}" for a, b, c, d, e in claim_rows(found)]
    t = doc["transfers"]
    if t["n"]:
        lines.append(f"Whole transfers: n={t['n']}, median |error| "
                     f"{100 * t['median_abs_error']:.1f}%, p90 {100 * t['p90_abs_error']:.1f}%, "
                     f"bias {100 * t['mean_error']:+.1f}%.")
    else:
        lines.append("Whole transfers: none predicted (transfer_s).")
    return lines


def report(doc: dict, source: str) -> str:
    """report.md of a judged predictions file: the answer, then every verdict."""
    from testbed.validate.report.render_three_way import METRIC_WORDS, _pct, _pts

    lines = [f"# Predictions judged: {source} against {doc['run']}", "",
             *answer_lines(doc, source), "", "## Mean TTFT per scheduler", ""]
    for point, by in doc["ttft_verdicts"].items():
        for sched, v in by.items():
            lines.append(f"- {point} {sched}: {v['sentence']}")
    lines += ["", "## The claims", "", "| point | claim | metric | packets | predicted | "
              "predicted - packets [95% CI], pts | verdict |", "|---|---|---|---|---|---|---|"]
    for point, by in doc["claims"].items():
        for c in by["claims"]:
            lines.append(f"| {point} | {c['scheduler']} vs {c['baseline']} | "
                         f"{METRIC_WORDS[c['metric']]} | {_pct(c['packets']['point'])} | "
                         f"{_pct(c['flow']['point'])} | {_pts(c['difference'])} | "
                         f"{c['verdict']} |")
    t = doc["transfers"]
    lines += ["", "## Whole transfers", "", "| where | n | median abs | p90 abs | mean |",
              "|---|---|---|---|---|"]
    rows = [("all", t)] + [(f"tier {k}", v) for k, v in t.get("by_tier", {}).items()]
    lines += [f"| {w} | {v['n']} | {100 * v['median_abs_error']:.1f}% | "
              f"{100 * v['p90_abs_error']:.1f}% | {_pct(v['mean_error'])} |"
              for w, v in rows if v["n"]]
    return "\n".join(lines) + "\n"
