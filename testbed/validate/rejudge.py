"""`testbed judge FOLDER`: a finished validation judged again from its folder alone (its
packets' runs and calibration kept, the flow model run anew), a validation on both packet
engines with its ns-3 validation and three-way section too."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from testbed.records import PARTIAL
from testbed.validate import three_way
from testbed.validate.pipeline import judge


def judge_again(folder: Path, executor=None) -> dict:
    """Judge a finished validation folder anew (its packets run and calibration kept; the
    flow model's runs made again beside the old ones, on `executor`: here by default)."""
    from testbed.scenario import Scenario

    folder = Path(folder)
    if (folder / PARTIAL).exists():
        raise ValueError(f"{folder}: this validation did not finish (PARTIAL)")
    try:
        raw = yaml.safe_load((folder / "scenario.yaml").read_text(encoding="utf-8"))
        cal = json.loads((folder / "calibration.json").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ValueError(f"{folder}: not a validation folder ({exc})") from None
    # the packets' run: the emulation's, or ns-3's (validate --packets ns3)
    packets = sorted(folder.glob("*-emulation-*")) or sorted(folder.glob("*-ns3-*"))
    if not packets or not isinstance(raw, dict) or "capacity_factor" not in cal:
        raise ValueError(f"{folder}: not a validation folder (needs scenario.yaml, "
                         "calibration.json and the packets' run folder)")
    doc = judge(Scenario.model_validate(raw), folder, packets[-1], cal, executor=executor)
    if (folder / three_way.STAND_IN / three_way.RUNS).exists():  # --packets both
        judge_again(three_way.ns3_validation(folder), executor)
        doc = three_way.rejudge(folder)
    return doc
