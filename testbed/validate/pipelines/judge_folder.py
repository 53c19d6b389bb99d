"""`testbed judge FOLDER`: a finished validation judged again from its folder alone (its
packets' runs and calibration kept, the flow model run anew), a validation on both packet
engines with its ns-3 validation and three-way section too, and the other flow models
it was judged with (or those asked for now)."""

from __future__ import annotations

from pathlib import Path

from testbed.inputs import read_json
from testbed.validate.pipelines import three_way
from testbed.validate.pipelines.flow_models import inputs, judge_models
from testbed.validate.pipelines.pipeline import judge, publish


def judge_again(folder: Path, executor=None, flow_models: list[str] | None = None) -> dict:
    """Judge a finished validation folder anew (its packets run and calibration kept; the
    flow model's runs made again beside the old ones, on `executor`: here by default).
    `flow_models`: the network models to judge beside the verdict's (None: those it was
    judged with before, if any)."""
    folder = Path(folder)
    scenario, cal, packets = inputs(folder)
    if flow_models is None:
        flow_models = previous_models(folder)
    doc = judge(scenario, folder, packets, cal, executor=executor)
    if (folder / three_way.STAND_IN / three_way.RUNS).exists():  # --packets both
        judge_again(three_way.ns3_validation(folder), executor, flow_models=[])
        doc = three_way.judge_section_again(folder, executor)
    if flow_models:
        doc = with_flow_models(folder, flow_models, executor)
    return doc


def previous_models(folder: Path) -> list[str]:
    """The network models a validation's comparison.json was judged with besides max-min."""
    try:  # a damaged one names no models: judge writes it anew
        rows = read_json(folder / "comparison.json")["flow_models"]["models"]
        return [str(r["model"]) for r in rows if r["model"] != "max-min"]
    except (ValueError, KeyError, TypeError):
        return []


def with_flow_models(folder: Path, keys: list[str], executor=None, on_step=None) -> dict:
    """comparison.json with its `flow_models` section judged anew (validate/pipelines/flow_models.py);
    on both packet engines the ns-3 validation's rows beside the emulation's."""
    from testbed.validate.comparison.document import load

    folder = Path(folder)
    section = judge_models(folder, keys, executor, on_step)
    if (folder / three_way.STAND_IN / three_way.RUNS).exists():
        section["ns3"] = with_flow_models(three_way.ns3_validation(folder), keys, executor,
                                          on_step)["flow_models"]
    doc = load(folder / "comparison.json")
    doc["flow_models"] = section
    return publish(folder, doc)
