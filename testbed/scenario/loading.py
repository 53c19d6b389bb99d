"""Scenario files: read, validated (every sweep point too) and resolved against the
file's folder; errors name the file and field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from testbed import yamlfile
from testbed.scenario.base import ScenarioError
from testbed.scenario.schema import Scenario


def _format_errors(source: str, exc: ValidationError, prefix: str = "") -> str:
    lines = [f"{source}: invalid scenario"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))
        lines.append(f"  {prefix}{loc or '(top level)'}: {err['msg']}")
    return "\n".join(lines)


def load_scenario(path: str | Path, overrides: dict[str, Any] | None = None) -> Scenario:
    """Load, validate (including every sweep point) and resolve paths against the file."""
    path = Path(path)
    if not path.is_file():
        raise ScenarioError(f"{path}: scenario file not found")
    try:
        raw = yamlfile.load(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not UTF-8 text (byte {exc.start}: "
                            f"{exc.object[exc.start:exc.start + 1]!r})") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ScenarioError(f"{path}: expected a mapping at the top level")
    raw = copy.deepcopy(raw)
    raw.setdefault("name", path.stem)
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        raise ScenarioError(_format_errors(str(path), exc)) from None
    try:
        if overrides:
            scenario = scenario.with_overrides(overrides)
    except ValidationError as exc:
        raise ScenarioError(_format_errors(f"{path} (with --set)", exc)) from None
    trace = scenario.workload.trace
    if trace is not None and scenario.workload.synthetic is None:
        resolved = resolve_path(trace, path.parent)
        if not resolved.is_file():
            raise ScenarioError(f"{path}: workload.trace: file not found: {trace}")
        scenario = scenario.with_overrides({"workload.trace": str(resolved)})
    for point, _ in _validated_cells(scenario, path):
        del point
    return scenario


def _validated_cells(scenario: Scenario, path: Path):
    try:
        return scenario.points()
    except ValidationError as exc:
        raise ScenarioError(_format_errors(str(path), exc, prefix="sweep point: ")) from None


def resolve_path(value: str, base: Path) -> Path:
    """A relative path means: next to the scenario file, else the project root, else CWD."""
    p = Path(value)
    if p.is_absolute():
        return p
    for root in (base, Path(__file__).resolve().parent.parent, Path.cwd()):
        if (root / p).exists():
            return (root / p).resolve()
    return (base / p).resolve()
