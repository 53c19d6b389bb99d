"""`testbed validate`: the same scenario and seeds on packets and in the flow model.

1. Emulate every cell (with a calibration of the fabric first, unless one is given).
2. Simulate the same cells in the flow model, before and after calibration. The flow
   model follows the ECMP the fabric realises: per-transfer scenarios run per-pair
   (switches hash addresses, so a pair's transfers share one path on packets).
3. Replay the emulation's own transfers (start, size, endpoints, path) through the
   flow model, before and after calibration: network-model error alone, without
   scheduling divergence.
4. Write report.md, comparison.json and plots/*.png.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import yaml

from testbed.metrics import aggregate
from testbed.records import PARTIAL, atomic_write, read_csv, stamp, write_json
from testbed.runner import run_flowsim
from testbed.validate import compare
from testbed.validate.replay import replay_transfers

PAPER_TTFT_OVERESTIMATE = (0.09, 0.13)  # NetKV paper: flow estimator vs its packet model
TARGET_TRANSFER_ERROR = 0.10
TARGET_TTFT_ERROR = 0.10


def flow_twin(scenario, capacity_factor: dict[int, float] | None = None):
    """The flow-model scenario that matches what the packets did."""
    over = {}
    if scenario.network.ecmp == "per-transfer":
        over["network.ecmp"] = "per-pair"
    if capacity_factor is not None:
        over["network.capacity_factor"] = {int(k): float(v) for k, v in capacity_factor.items()}
    return scenario.with_overrides(over) if over else scenario


def cells_of(folder: Path) -> dict[str, Path]:
    return {str(p.parent.relative_to(folder / "cells")): p.parent
            for p in sorted((folder / "cells").glob("*/*/seed*/summary.json"))}


def transfer_pairs(ref_cells: dict[str, Path], model_rows: dict[str, list[dict]]) -> list:
    pairs = []
    for key, cell in ref_cells.items():
        if key in model_rows:
            got, _ = compare.match_transfers(read_csv(cell / "transfers.csv"), model_rows[key])
            pairs.extend(got)
    return pairs


def replay_cells(scenario, emu_cells: dict[str, Path],
                 capacity_factor: dict[int, float] | None) -> dict[str, list[dict]]:
    bg = scenario.network.background
    out = {}
    for key, cell in emu_cells.items():
        rows = read_csv(cell / "transfers.csv")
        out[key] = replay_transfers(scenario.cluster.spec(), rows, ecmp="per-pair",
                                    background={1: bg.tier1, 2: bg.tier2, 3: bg.tier3},
                                    capacity_factor=capacity_factor)
    return out


def per_point(cells: dict[str, Path]) -> dict[str, dict[str, dict]]:
    """point -> scheduler -> seeds' aggregate of summary.json (+ the fidelity verdicts)."""
    seeds: dict[str, dict[str, list[dict]]] = {}
    for key, cell in cells.items():
        point, sched, _ = key.split("/")
        seeds.setdefault(point, {}).setdefault(sched, []).append(
            json.loads((cell / "summary.json").read_text()))
    out: dict[str, dict[str, dict]] = {}
    for point, by in seeds.items():
        out[point] = {}
        for sched, summaries in by.items():
            agg = aggregate(summaries)
            verdicts = [s.get("fidelity") for s in summaries if s.get("fidelity")]
            if verdicts:
                agg["fidelity"] = ("faithful" if all(v == "faithful" for v in verdicts)
                                   else "unfaithful")
            out[point][sched] = agg
    return out


def engine_comparison(emu: dict, flow: dict) -> dict:
    return {point: {"metrics": compare.metric_comparison(emu[point], flow[point]),
                    "ranking": compare.ranking_agreement(emu[point], flow[point])}
            for point in sorted(set(emu) & set(flow))}


def validate(scenario, out_root: Path, calibration: dict | None = None,
             on_step: Callable[[str, float], None] | None = None, verbose: bool = False) -> Path:
    from testbed.emulation.calibrate import calibrate
    from testbed.emulation.orchestrator import run_emulation

    folder = out_root / f"{scenario.name}-validate-{stamp()}"
    folder.mkdir(parents=True)
    atomic_write(folder / PARTIAL, "validation started; not finished\n")
    atomic_write(folder / "scenario.yaml",
                 yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))
    measured: list[dict] = []

    def on_fabric(network, _celldir) -> None:
        if calibration is None and not measured:
            measured.append(calibrate(network, lambda label: on_step and on_step(label, 0.0)))

    emu = run_emulation(scenario, folder, on_step, verbose=verbose, on_fabric=on_fabric)
    cal = calibration or measured[0]
    write_json(folder / "calibration.json", cal)
    factors = {int(k): float(v) for k, v in cal["capacity_factor"].items()}
    if on_step:
        on_step("flow model (uncalibrated and calibrated) and replays", 0.0)
    flow_raw = run_flowsim(flow_twin(scenario), folder).folder
    flow_cal = run_flowsim(flow_twin(scenario, factors), folder).folder
    doc = build_document(scenario, emu.folder, flow_raw, flow_cal, cal, factors)
    write_json(folder / "comparison.json", doc)
    from testbed.validate.plots import write_plots
    from testbed.validate.render import render_validation

    plots = write_plots(doc, folder / "plots")
    atomic_write(folder / "report.md", render_validation(doc, plots, folder))
    (folder / PARTIAL).unlink(missing_ok=True)
    return folder


def build_document(scenario, emu_folder: Path, flow_raw: Path, flow_cal: Path, cal: dict,
                   factors: dict[int, float]) -> dict:
    emu_cells = cells_of(emu_folder)
    raw_cells, cal_cells = cells_of(flow_raw), cells_of(flow_cal)
    load = {k: read_csv(c / "transfers.csv") for k, c in raw_cells.items()}
    load_cal = {k: read_csv(c / "transfers.csv") for k, c in cal_cells.items()}
    pairs = {
        "replay_uncalibrated": transfer_pairs(emu_cells, replay_cells(scenario, emu_cells, None)),
        "replay_calibrated": transfer_pairs(emu_cells, replay_cells(scenario, emu_cells, factors)),
        "engines_uncalibrated": transfer_pairs(emu_cells, load),
        "engines_calibrated": transfer_pairs(emu_cells, load_cal),
    }
    emu_pts, raw_pts, cal_pts = per_point(emu_cells), per_point(raw_cells), per_point(cal_cells)
    return {
        "scenario": scenario.name,
        "folders": {"emulation": str(emu_folder), "flow_uncalibrated": str(flow_raw),
                    "flow_calibrated": str(flow_cal)},
        "calibration": cal,
        "transfers": {name: compare.error_summary(p) for name, p in pairs.items()},
        "transfer_samples": {name: [[p.reference_s, p.model_s, p.tier, p.size_bytes]
                                    for p in ps] for name, ps in pairs.items()},
        "uncalibrated": engine_comparison(emu_pts, raw_pts),
        "calibrated": engine_comparison(emu_pts, cal_pts),
        "tiers": {point: {sched: {"packets": emu_pts[point][sched].get("tier_share", {}),
                                  "flow": cal_pts.get(point, {}).get(sched, {}).get(
                                      "tier_share", {})}
                          for sched in emu_pts[point]} for point in emu_pts},
        "fidelity": {point: {sched: s.get("fidelity", "unknown") for sched, s in by.items()}
                     for point, by in emu_pts.items()},
        "targets": targets(pairs["replay_calibrated"], pairs["engines_calibrated"],
                           engine_comparison(emu_pts, cal_pts)),
    }


def targets(replay_pairs, engine_pairs, calibrated: dict) -> dict:
    """The issue's acceptance figures, measured (never asserted here)."""
    replay = compare.error_summary(replay_pairs)
    engines = compare.error_summary(engine_pairs)
    worst_ttft = max((abs(m["ttft_mean_ms_error"]) for d in calibrated.values()
                      for m in d["metrics"] if m["ttft_mean_ms_error"] is not None), default=None)
    same_rank = all(d["ranking"]["same_order"] for d in calibrated.values())
    return {
        "replay_median_abs_transfer_error": replay["median_abs_error"],
        "engines_median_abs_transfer_error": engines["median_abs_error"],
        "worst_mean_ttft_error": worst_ttft,
        "same_ranking": same_rank,
        "transfer_target": TARGET_TRANSFER_ERROR, "ttft_target": TARGET_TTFT_ERROR,
    }
