"""comparison.json as a typed model: what a validation wrote, checked when it is written
and when it is read, with a schema version, so a reader meets a named field error (and
what to do about it) instead of a KeyError deep in a report.

The parts every reader depends on (the answer, the targets, the claims, what was judged,
the run folders) are typed field by field; the detail sections the report lays out are
typed as mappings. Each term judged beside the verdict's model (beside.TERMS) is a
section of its own under its key, empty (null) where it was not fitted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from testbed.inputs import InputError, read_json
from testbed.records import write_json
from testbed.validate.judging.decision import Verdict

SCHEMA_VERSION = 1
Section = dict[str, Any]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class IntervalRecord(_Record):
    point: float | None
    low: float | None
    high: float | None
    se: float | None = None
    n: int | None = None


class ClaimRecord(_Record):
    scheduler: str
    baseline: str
    metric: str
    n: int
    packets: IntervalRecord
    flow: IntervalRecord
    difference: IntervalRecord
    on_packets: Verdict
    verdict: Verdict
    sentence: str
    network: IntervalRecord | None = None
    network_verdict: Verdict | None = None
    replay: IntervalRecord | None = None
    difference_with_draws: IntervalRecord | None = None


class PointClaimsRecord(_Record):
    n: int
    claims: list[ClaimRecord]
    ranking: Section
    values: Section


class Judged(_Record):
    measured_requests: int
    paired_requests: int
    seeds: int | None = None


class Targets(_Record):
    """The acceptance figures and verdict counts (summary.targets and the parts after)."""

    replay_median_abs_transfer_error: float | None
    replay_median_ci: list[float | None]
    replay_p90_abs_transfer_error: float | None
    replay_p90_ci: list[float | None]
    engines_median_abs_transfer_error: float | None
    worst_mean_ttft_error: float | None
    ttft_verdicts: dict[str, int]
    same_ranking: bool | None
    runs: int
    unfaithful_runs: int
    transfer_target: float
    transfer_p90_target: float
    engines_target: float | None = None  # older folders lack it: targets.ENGINES_MEDIAN
    ttft_target: float
    ttft_ci_target: float
    packets: str
    gain_verdicts: dict[str, int] | None = None
    network_gain_verdicts: dict[str, int] | None = None
    gain_lines: list[str] = []
    ranking_probability: Section = {}
    forced_ttft_verdicts: dict[str, int] | None = None
    forced_worst_mean_ttft_error: float | None = None
    packets_runs: int | None = None
    packets_cells: int | None = None
    packets_median_abs_transfer_error: float | None = None
    packets_p90_abs_transfer_error: float | None = None
    packets_median_ci: list[float | None] | None = None
    packets_p90_ci: list[float | None] | None = None
    replay_same_p90_abs_transfer_error: float | None = None
    packets_engines_median_abs_transfer_error: float | None = None
    packets_engines_median_ci: list[float | None] | None = None


class BesideTerm(_Record):
    """A fitted term judged the other way (on where it is off, off where it is on)."""

    title: str
    field: str
    model: str
    value: float
    in_verdict: bool
    replay: Section
    engines: Section
    ttft_verdicts: Section
    seed_rankings: Section


class Comparison(_Record):
    """One validation's comparison.json, in the order it is written."""

    schema_version: int = SCHEMA_VERSION
    scenario: str
    ecmp: Section | None = None
    folders: dict[str, str]
    calibration: Section
    transfers: Section
    stalls: Section
    arrival: Section
    repeat: Section | None
    whole_transfers: Section
    whole_above_floor: Section
    whole_below_floor: Section
    transfer_samples: Section
    validity: Section
    tcp_ablation: Section
    contention: BesideTerm | None  # the terms judged beside (beside.TERMS)
    join_stall: BesideTerm | None
    spread: BesideTerm | None
    decisions: Section | None
    trajectory: Section | None
    excluded_runs: list[str]
    uncalibrated: Section
    calibrated: Section
    tcp: Section
    ttft_verdicts: Section
    seed_rankings: Section
    draw_rankings: Section | None = None  # packet runs of one workload ranked alike
    tiers: Section
    fidelity: dict[str, dict[str, str]]
    claims: dict[str, PointClaimsRecord]
    sequential: Section | None
    judged: Judged
    targets: Targets
    three_way: Section | None = None  # --packets both: ns-3 vs the emulation, flow vs ns-3
    flow_models: Section | None = None  # --flow-model: other network models, a row each

    def beside(self) -> dict[str, BesideTerm]:
        """The terms judged beside the verdict's model that were fitted, by key."""
        return {k: v for k in BESIDE if (v := getattr(self, k)) is not None}


BESIDE = ("contention", "join_stall", "spread")


def _first(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(top)"
    return f"{where}: {err['msg']}"


class DocumentError(InputError):
    """A comparison.json that is not what this version writes; the message names the
    field and what to do."""


def check(doc: dict, where: str = "comparison.json") -> Comparison:
    try:
        return Comparison.model_validate(doc)
    except ValidationError as exc:
        raise DocumentError(f"{where}: {_first(exc)}") from None


def write_comparison(path: Path, doc: dict) -> dict:
    """Check the document against the model, then write it, its schema version first
    (as built: the model checks it, the sections keep their order and their NaNs)."""
    out = {"schema_version": SCHEMA_VERSION, **doc}
    check(out, str(path))
    write_json(path, out)
    return out


def load(path: Path) -> dict:
    """A validation's comparison.json as the dict it was written as, checked against the
    model first; an older or foreign one is refused with what to do."""
    try:
        doc = read_json(path, object)
    except InputError as exc:
        raise DocumentError(f"cannot be read: {exc}") from None
    if not isinstance(doc, dict):
        raise DocumentError(f"{path}: not a validation's comparison.json")
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise DocumentError(
            f"{path}: schema_version {version!r}, this version reads {SCHEMA_VERSION}: "
            f"`testbed judge {Path(path).parent}` writes it again")
    check(doc, str(path))
    return doc


def read_comparison(path: Path) -> Comparison:
    """A validation's comparison.json as its model (load's checks)."""
    return Comparison.model_validate(load(path))
