"""Other flow models judged against the same packets (`validate --flow-model`, `testbed
judge --flow-model`): a row per network model (testbed/model/extensions/network_models.py), each
with the statistics of the validation's own verdict.

Every model is given what the verdict's model is given: the calibration's link rates and
TCP fit (flow_scenario), the packets' ECMP; then it is judged twice as the verdict's model
is, by replaying the packets' own transfers (the network alone) and with both engines
deciding (its own runs, claims with the draws' spread, TTFT per scheduler, rankings per
seed). The transfers judged by replay are those above the validity floor of the verdict's
model, the same for every row. max-min's row is the validation's own verdict, computed
anew by the same function (its targets equal the document's)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import yaml

from testbed.inputs import InputError, read_json, read_text
from testbed.model.extensions import network_models
from testbed.records import PARTIAL, read_csv
from testbed.runner import run_simulated
from testbed.validate.comparison.sections import cells_of, engine_comparison, per_point
from testbed.validate.comparison.summary import claim_targets, targets
from testbed.validate.comparison.verdicts import (
    faithful_cells,
    point_claims,
    seed_rankings,
    ttft_verdicts,
)
from testbed.validate.engines.contention import with_probe_fits
from testbed.validate.engines.flow_match import flow_scenario, replay_scenario
from testbed.validate.engines.flow_replay import replay_cells, whole_pairs
from testbed.validate.judging import stats, trajectory, validity
from testbed.workloads.build import seed_groups

MODELS = "flow-models"  # a validation folder's runs of the other flow models


def inputs(folder: Path) -> tuple[object, dict, Path]:
    """A finished validation folder's scenario, calibration and packets' run folder."""
    from testbed.scenario import Scenario
    from testbed.validate.pipelines.pipeline import calibration_shape

    folder = Path(folder)
    if (folder / PARTIAL).exists():
        raise InputError(f"{folder}: this validation did not finish (PARTIAL)")
    packets = sorted(folder.glob("*-emulation-*")) or sorted(folder.glob("*-ns3-*"))
    if not packets or not all((folder / f).exists() for f in ("scenario.yaml",
                                                              "calibration.json")):
        raise InputError(f"{folder}: not a validation folder (needs scenario.yaml, "
                         "calibration.json and the packets' run folder)")
    try:
        raw = yaml.safe_load(read_text(folder / "scenario.yaml"))
    except yaml.YAMLError as exc:
        raise InputError(f"{folder / 'scenario.yaml'}: not YAML ({exc})") from None
    if not isinstance(raw, dict):
        raise InputError(f"{folder / 'scenario.yaml'}: not a scenario")
    cal = read_json(folder / "calibration.json")
    calibration_shape(cal, str(folder / "calibration.json"))
    # the packets' run: the emulation's, or ns-3's (validate --packets ns3)
    if not any(packets[-1].glob("cells/*/*/seed*/summary.json")):
        raise InputError(f"{packets[-1]}: no finished run in it (cells/<point>/<scheduler>/"
                         "seed*/summary.json)")
    return Scenario.model_validate(raw), cal, packets[-1]


def check_models(keys: list[str]) -> list[str]:
    """The models asked for, each resolved now (PluginError names a bad one), max-min
    first and none twice."""
    out = [network_models.MAX_MIN]
    for key in keys:
        if not network_models.is_max_min(key):
            network_models.resolve(key)
        if key not in out:
            out.append(key)
    return out


def judge_models(folder: Path, keys: list[str], executor=None,
                 on_step: Callable[[str, float], None] | None = None) -> dict:
    """The section `flow_models` of `folder`'s comparison.json: a row per model (max-min,
    the verdict's model, first), its runs under folder/flow-models/<model>/."""
    scenario, cal, packets = inputs(folder)
    cal = with_probe_fits(scenario, cal)  # the fit the verdict's model was given (judge)
    doc_path = folder / "comparison.json"
    doc = read_json(doc_path, object)
    seq = doc.get("sequential")
    level = seq["level"] if seq else stats.CONFIDENCE
    rows = []
    for key in check_models(keys):
        if on_step:
            on_step(f"flow model {key}: replay and its own runs", 0.0)
        rows.append(model_row(scenario, packets, cal, key, folder / MODELS / _slug(key),
                              level, bool(seq), executor))
    return {"packets": doc["targets"]["packets"], "level": level, "models": rows}


def _slug(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in key)


def model_row(scenario, packets: Path, cal: dict, key: str, out: Path, level: float,
              normal: bool, executor=None) -> dict:
    """One model against the packets, by replay and with both engines deciding."""
    factors = {int(k): float(v) for k, v in cal["capacity_factor"].items()}
    fit = cal.get("tcp", {})
    model = scenario.with_overrides({"network.model": key})
    all_emu = cells_of(packets)
    emu_cells, flagged = faithful_cells(all_emu)
    replayed = replay_cells(replay_scenario(model, factors, fit), all_emu, factors)
    floors = validity.floors(flow_scenario(scenario, factors, fit), factors)
    above = [p for p in whole_pairs(all_emu, replayed)
             if validity.above_floor(p.tier, p.size_bytes, floors)]
    matched = flow_scenario(model, factors, fit)
    if out.exists():
        shutil.rmtree(out)  # judged again: this model's runs made anew
    out.mkdir(parents=True)
    flow_cells = cells_of(run_simulated(matched, out, executor=executor).folder)
    loads = {k: read_csv(c / "transfers.csv") for k, c in flow_cells.items()}
    verdicts = ttft_verdicts(emu_cells, flow_cells)
    gains = point_claims(emu_cells, flow_cells, level, normal=normal, replayed=replayed,
                         draws=trajectory.spread(matched, executor=executor),
                         group_of=seed_groups(scenario))
    faithful = engine_comparison(per_point(emu_cells), per_point(flow_cells))
    engines = whole_pairs(emu_cells, loads)
    return {
        "model": key, "name": network_models.display_name(key), "folder": str(out),
        "targets": {**targets(above, engines, faithful, verdicts, len(all_emu), len(flagged)),
                    **claim_targets(gains)},
        "claims": gains, "ttft_verdicts": verdicts,
        "seed_rankings": seed_rankings(emu_cells, flow_cells),
        "faults": sum(int((read_json((c / "summary.json"), object)
                           .get("network_model_faults") or {}).get("total", 0))
                      for c in flow_cells.values()),
    }
