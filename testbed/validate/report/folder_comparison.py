"""Compare two run folders cell by cell and write report.md (`testbed compare`; the math
is judging/model_errors.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from testbed.inputs import InputError
from testbed.metrics import aggregate
from testbed.records import PARTIAL, atomic_write, read_csv, write_json
from testbed.validate.judging import model_errors


class RunFolderError(InputError):
    """A run folder that cannot be compared; the message names it and why."""


def _cells(folder: Path) -> dict[str, Path]:
    if not folder.is_dir():
        raise RunFolderError(f"{folder}: not a run folder")
    if (folder / PARTIAL).exists():
        why = (folder / PARTIAL).read_text().strip()
        raise RunFolderError(f"{folder}: the run did not finish ({why})")
    cells = {str(p.parent.relative_to(folder / "cells")): p.parent
             for p in (folder / "cells").glob("*/*/seed*/summary.json")}
    if not cells:
        raise RunFolderError(f"{folder}: no cells/*/<scheduler>/seed*/summary.json inside")
    return cells


TRANSFER_COLUMNS = ("request", "shard", "tier", "bytes", "start", "end")


def _summary(path: Path) -> dict:
    """A cell's summary.json, or a RunFolderError naming the file and what is wrong."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RunFolderError(f"{path}: not a readable JSON summary ({exc})") from None
    if not isinstance(doc, dict):
        raise RunFolderError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _transfers(path: Path) -> list[dict]:
    """A cell's transfers.csv with the columns compare pairs on, every value checked."""
    try:
        rows = read_csv(path)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise RunFolderError(f"{path}: not a readable CSV ({exc})") from None
    for line, row in enumerate(rows, start=2):
        missing = [c for c in TRANSFER_COLUMNS if row.get(c) is None]
        if missing:
            raise RunFolderError(f"{path}:{line}: missing column(s) {', '.join(missing)}")
        try:
            int(row["shard"]), int(row["tier"]), float(row["bytes"])
            for c in ("start", "end"):
                if row[c] not in ("", None):
                    float(row[c])
        except ValueError as exc:
            raise RunFolderError(f"{path}:{line}: {exc}") from None
    return rows


def compare_runs(reference: Path, model: Path, out: Path) -> dict:
    """Per common cell: transfer errors; per point: metrics and ranking in both runs."""
    ref_cells, mod_cells = _cells(reference), _cells(model)
    common = sorted(set(ref_cells) & set(mod_cells))
    if not common:
        raise RunFolderError(f"{reference} and {model} share no cell (point/scheduler/seed)")
    all_pairs = []
    seeds: dict[str, dict[str, dict[str, list[dict]]]] = {}
    for key in common:
        pairs, _ = model_errors.match_transfers(_transfers(ref_cells[key] / "transfers.csv"),
                                           _transfers(mod_cells[key] / "transfers.csv"))
        all_pairs.extend(pairs)
        point, sched, _seed = key.split("/")
        for side, cells in (("reference", ref_cells), ("model", mod_cells)):
            summary = _summary(cells[key] / "summary.json")
            seeds.setdefault(point, {}).setdefault(side, {}).setdefault(sched, []).append(summary)
    # mean over the seeds both runs have, as the runs' own tables report
    per_point = {p: {side: {s: aggregate(v) for s, v in by.items()} for side, by in d.items()}
                 for p, d in seeds.items()}
    doc = {
        "reference": str(reference), "model": str(model), "cells": len(common),
        "transfers": model_errors.error_summary(all_pairs),
        "points": {p: {"metrics": model_errors.metric_comparison(d["reference"], d["model"]),
                       "ranking": model_errors.ranking_agreement(d["reference"], d["model"])}
                   for p, d in sorted(per_point.items())},
    }
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "comparison.json", doc)
    atomic_write(out / "report.md", render(doc))
    return doc


def _pct(x) -> str:
    return "-" if x is None or x != x else f"{100 * x:+.1f}%"


def render(doc: dict) -> str:
    t = doc["transfers"]
    lines = [
        "# Run comparison", "",
        f"reference: `{doc['reference']}`  ",
        f"model: `{doc['model']}`  ",
        f"{doc['cells']} common cells; errors are (model - reference) / reference.", "",
        "## Per-transfer completion time", "",
        "| slice | n | median abs error | p90 abs error | mean error (bias) |",
        "|---|---|---|---|---|",
        f"| all | {t['n']} | {_pct(t['median_abs_error'])} | {_pct(t['p90_abs_error'])} | "
        f"{_pct(t['mean_error'])} |",
    ]
    for label, group in [(f"tier {k}", v) for k, v in t["by_tier"].items()] + \
            list(t["by_size"].items()):
        lines.append(f"| {label} | {group['n']} | {_pct(group['median_abs_error'])} | "
                     f"{_pct(group['p90_abs_error'])} | {_pct(group['mean_error'])} |")
    for point, data in doc["points"].items():
        r = data["ranking"]
        lines += ["", f"## {point}", "",
                  "| scheduler | TTFT mean ref / model (ms) | error | P99 ref / model | "
                  "xfer ref / model (ms) |", "|---|---|---|---|---|"]
        for m in data["metrics"]:
            lines.append(
                f"| {m['scheduler']} | {m['ttft_mean_ms_reference']:.0f} / "
                f"{m['ttft_mean_ms_model']:.0f} | {_pct(m['ttft_mean_ms_error'])} | "
                f"{m['ttft_p99_ms_reference']:.0f} / {m['ttft_p99_ms_model']:.0f} | "
                f"{m['transfer_mean_ms_reference']:.0f} / {m['transfer_mean_ms_model']:.0f} |")
        lines += ["", f"ranking by mean TTFT: reference {' < '.join(r['reference'])}; model "
                  f"{' < '.join(r['model'])}; {'same order' if r['same_order'] else 'DIFFERENT order'}"
                  f" (Kendall tau {r['kendall_tau']:.2f})"]
    return "\n".join(lines) + "\n"
