"""Which flow-model terms are on by default, chosen on held-out rows.

Each row is one validation (comparison.json) of a different workload. A term is judged
by two figures per row: the replay's p90 |error| per whole transfer (the network model
alone, at the packets' own decisions) and the mean |mean-TTFT error| over schedulers with
both engines deciding on their own (the question users ask). Leaving each row out in
turn, a term is chosen on the other rows when it lowers both figures on most of them;
it is on by default only if it is chosen whichever row is left out and then improves
both figures on at least half of the rows it was not chosen on. A term fitted or tuned
on one workload cannot pass this.
"""

from __future__ import annotations

import math

from testbed.validate.comparison.beside import TERMS as BESIDE

# term -> (the model without it, the model with it), as a validation's flow runs name them
TERMS = {"TCP terms": ("calibrated", "tcp"),
         **{t.title: (t.model, "tcp") if t.in_verdict else ("tcp", t.model)
            for t in BESIDE.values()}}
FIGURES = ("replay_p90", "ttft_error")


def row_figures(doc: dict) -> dict[str, dict[str, float]]:
    """model -> {replay_p90, ttft_error} of one validation; a model the validation did not
    run (a term not fitted) is left out."""
    whole = doc["whole_transfers"]
    runs = {"calibrated": (whole.get("replay_calibrated"), doc["ttft_verdicts"].get("calibrated")),
            "tcp": (whole.get("replay_tcp"), doc["ttft_verdicts"].get("tcp"))}
    for key in BESIDE:
        if doc.get(key):
            runs[doc[key]["model"]] = (doc[key]["replay"], doc[key]["ttft_verdicts"])
    out = {}
    for model, (replay, verdicts) in runs.items():
        errors = [abs(v["point"]) for by in (verdicts or {}).values() for v in by.values()
                  if v["point"] == v["point"]]
        if replay and errors:
            out[model] = {"replay_p90": replay["p90_abs_error"],
                          "ttft_error": sum(errors) / len(errors)}
    return out


def _improves(rows: dict[str, dict], names, without: str, with_: str) -> dict[str, bool]:
    """Whether the term lowers each figure on most of `names`."""
    out = {}
    for fig in FIGURES:
        wins = [rows[n][with_][fig] < rows[n][without][fig] for n in names]
        out[fig] = bool(wins) and sum(wins) > len(wins) / 2
    return out


def held_out(rows: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict]:
    """term -> its folds (row left out, chosen on the others, improved there) and whether
    it is on by default. `rows`: row name -> row_figures()."""
    out = {}
    for term, (without, with_) in TERMS.items():
        names = [n for n, r in rows.items() if without in r and with_ in r]
        folds = []
        for left in names:
            others = [n for n in names if n != left]
            chosen = all(_improves(rows, others, without, with_).values())
            there = {fig: rows[left][with_][fig] < rows[left][without][fig] for fig in FIGURES}
            folds.append({"held_out": left, "chosen": chosen, "improved": there})
        better = sum(all(f["improved"].values()) for f in folds)
        out[term] = {"folds": folds, "rows": len(names),
                     "default_on": len(names) >= 3 and all(f["chosen"] for f in folds)
                     and better >= math.ceil(len(folds) / 2)}
    return out


def selection_lines(rows: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    """The figures per row and model, then each term's held-out folds and its default."""
    def pct(x) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    models = [m for m in ("calibrated", "tcp", *(t.model for t in BESIDE.values()))
              if any(m in r for r in rows.values())]
    lines = ["| row | " + " | ".join(f"{m}: replay p90 / mean-TTFT error" for m in models)
             + " |", "|---|" + "---|" * len(models)]
    for name, r in rows.items():
        lines.append(f"| {name} | " + " | ".join(
            f"{pct(r[m]['replay_p90'])} / {pct(r[m]['ttft_error'])}" if m in r else "-"
            for m in models) + " |")
    for term, t in held_out(rows).items():
        folds = "; ".join(
            f"{f['held_out']}: {'chosen' if f['chosen'] else 'not chosen'}, there "
            + ("better on both" if all(f["improved"].values()) else
               "better on " + (", ".join(k for k, v in f["improved"].items() if v) or "neither"))
            for f in t["folds"])
        lines += ["", f"{term}: {'ON' if t['default_on'] else 'off'} by default over "
                  f"{t['rows']} rows (left out in turn: {folds or 'no rows'})"]
    return lines
