"""Handles on finished run folders: a simulate or emulate run, or a validation, read from
its folder alone, so a run made earlier, by the CLI or on another machine, opens the same
way as one made in this process."""

from __future__ import annotations

import contextlib
import math
from functools import cached_property
from pathlib import Path

import yaml

from testbed.inputs import read_json
from testbed.model.extensions.plugins import display_name
from testbed.records import PARTIAL
from testbed.scenario import Scenario


def open_run(folder: str | Path) -> RunResult | ValidationResult:
    """The result of a run made earlier: a simulate or emulate folder, or a validation."""
    path = Path(folder)
    if not path.is_dir():
        raise ValueError(f"{path}: no such run folder")
    if (path / "comparison.json").exists() or path.name.split("-")[-3:-2] == ["validate"]:
        return ValidationResult(path)
    if not (path / "cells").is_dir():
        raise ValueError(f"{path}: not a run folder (no cells/)")
    return RunResult(path)


class RunResult:
    """One run folder of either engine. DataFrames hold every cell's rows with the cell's
    `scheduler` (its key), `seed`, `cell` (folder) and sweep values as columns."""

    def __init__(self, folder: Path, scenario: Scenario | None = None, outcome=None,
                 executor: str | None = None):
        self.folder = Path(folder)
        self._scenario = scenario
        self.outcome = outcome  # cells.RunOutcome of a run made in this process
        self.wall_s = outcome.wall_s if outcome is not None else None
        self.executor = executor

    def __repr__(self) -> str:
        state = "partial" if self.partial else "finished"
        return f"<RunResult {self.engine} {self.folder} ({state}, {len(self.cells)} runs)>"

    @property
    def partial(self) -> bool:
        """The folder is marked PARTIAL (interrupted, or cells lost)."""
        return (self.folder / PARTIAL).exists()

    @cached_property
    def summary(self) -> dict:
        """summary.json: the scenario's rows (mean and std over seeds) and run facts."""
        path = self.folder / "summary.json"
        return read_json(path, object) if path.exists() else {}

    @property
    def engine(self) -> str:
        return self.summary.get("engine", "?")

    @property
    def table(self) -> str:
        """table.md: the paper-style comparison table (Markdown)."""
        path = self.folder / "table.md"
        return path.read_text() if path.exists() else ""

    @cached_property
    def scenario(self) -> Scenario | None:
        if self._scenario is None:
            with contextlib.suppress(OSError, ValueError, yaml.YAMLError):
                data = yaml.safe_load((self.folder / "scenario.yaml").read_text())
                self._scenario = Scenario.model_validate(data)
        return self._scenario

    @cached_property
    def cells(self) -> list[Path]:
        """Every finished run's folder (cells/<point>/<scheduler>/seed<k>)."""
        return sorted(p.parent for p in self.folder.glob("cells/*/*/seed*/summary.json"))

    def _points(self) -> dict[str, dict]:
        """cell folder name -> its sweep point."""
        if self.scenario is None or not self.scenario.sweep:
            return {}
        from testbed.cells import slug

        return {f"{i:03d}-{slug(point)}": point
                for i, (point, _) in enumerate(self.scenario.points())}

    def _frame(self, name: str):
        import pandas as pd

        points = self._points()
        frames = []
        for cell in self.cells:
            path = cell / name
            if not path.exists() or path.stat().st_size == 0:
                continue
            df = pd.read_csv(path)
            point_dir = cell.parent.parent.name
            df.insert(0, "seed", int(cell.name.removeprefix("seed")))
            df.insert(0, "name", display_name(cell.parent.name))
            df.insert(0, "scheduler", cell.parent.name)
            df.insert(0, "cell", point_dir)
            for key, value in points.get(point_dir, {}).items():
                df[key] = value
            frames.append(df)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    @cached_property
    def requests(self):
        """requests.csv of every run: one row per request (TTFT, tier, state, ...)."""
        return self._frame("requests.csv")

    @property
    def measured(self):
        """The requests the tables judge: measured (arrived inside the measurement window)
        and served. TTFT and TBT in seconds; pooled over seeds, where the tables average
        each seed's mean."""
        from testbed.lifecycle import SERVED_STATES

        df = self.requests
        if df.empty:
            return df
        return df[df["measured"].astype(bool) & df["state"].isin(SERVED_STATES)]

    @cached_property
    def transfers(self):
        """transfers.csv of every run: one row per KV shard transfer."""
        return self._frame("transfers.csv")

    @cached_property
    def links(self):
        """links.csv of every run: link utilisation samples."""
        return self._frame("links.csv")

    @cached_property
    def rows(self):
        """The comparison table as a DataFrame: one row per sweep point x scheduler
        (`scheduler` its key, `name` as the table shows it), every metric averaged over
        seeds (with its _std)."""
        import pandas as pd

        rows = []
        for row in self.summary.get("rows", []):
            # one naming with the other frames: the key as `scheduler`, the table's as `name`
            flat = {"scheduler": row.get("key", row.get("scheduler")),
                    "name": row.get("scheduler")}
            flat.update((k, v) for k, v in row.items()
                        if k not in ("point", "key", "scheduler"))
            flat.update(row.get("point") or {})
            for key in [k for k, v in flat.items() if isinstance(v, dict)]:
                for sub, value in flat.pop(key).items():
                    flat[f"{key}.{sub}"] = value
            rows.append(flat)
        return pd.DataFrame(rows)

    def fault_count(self) -> float:
        """Decisions a plugin scheduler lost to the fallback, from summary.json alone
        (per row: the mean over seeds)."""
        return sum(float((row.get("scheduler_faults") or {}).get("total") or 0.0)
                   for row in self.summary.get("rows", []))

    @property
    def scheduler_faults(self):
        """The requests a plugin scheduler failed on (raised, unknown instance, bad return,
        too slow), placed by the fallback instead; empty when every decision was the
        scheduler's."""
        import pandas as pd

        if not self.fault_count():
            return pd.DataFrame(columns=["scheduler", "seed", "id", "scheduler_fault"])
        df = self.requests
        return df[df["scheduler_fault"].fillna("").astype(str) != ""]

    def ttft_ms(self) -> dict[str, float]:
        """Mean TTFT (ms) of the measured requests served, per scheduler key."""
        df = self.requests
        if df.empty:
            return {}
        served = df[df["measured"].astype(bool) & df["ttft"].notna()]
        return {k: 1e3 * float(v) for k, v in served.groupby("scheduler")["ttft"].mean().items()
                if not math.isnan(v)}


class ValidationResult:
    """A validation folder: the packets run, the flow-model runs, the comparison."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def __repr__(self) -> str:
        return f"<ValidationResult {self.folder}>"

    @cached_property
    def comparison(self) -> dict:
        """comparison.json: every error with its interval, verdicts, targets."""
        from testbed.validate.comparison.document import load

        return load(self.folder / "comparison.json")

    @cached_property
    def document(self):
        """comparison.json as its typed model (testbed.validate.comparison.document.Comparison)."""
        from testbed.validate.comparison.document import Comparison

        return Comparison.model_validate(self.comparison)

    @property
    def targets(self) -> dict:
        return self.comparison["targets"]

    @property
    def report(self) -> Path:
        return self.folder / "report.md"

    @cached_property
    def claims(self):
        """The paper's claims as a DataFrame: one row per point x claim x metric, each
        gain (packets, flow) and their difference with its interval, and the verdicts."""
        import pandas as pd

        from testbed.model.extensions.plugins import display_name

        rows = []
        for point, by in (self.comparison.get("claims") or {}).items():
            for c in by["claims"]:
                row = {"point": point, "scheduler": display_name(c["scheduler"]),
                       "baseline": display_name(c["baseline"]), "metric": c["metric"],
                       "n": c["n"], "on_packets": c["on_packets"], "verdict": c["verdict"]}
                for part in ("packets", "flow", "difference"):
                    for k in ("point", "low", "high"):
                        row[part if k == "point" else f"{part}_{k}"] = c[part][k]
                rows.append(row)
        return pd.DataFrame(rows)

    def _folder(self, key: str) -> Path:
        """A run inside this folder, by its comparison.json key (found by name, so a
        moved or copied validation folder still opens)."""
        named = self.comparison.get("folders", {}).get(key)
        if named is None:
            raise ValueError(f"{self.folder}: comparison.json names no {key} run")
        return self.folder / Path(named).name

    @cached_property
    def emulation(self) -> RunResult:
        """The packet-level run."""
        return RunResult(self._folder("emulation"))

    @cached_property
    def flow(self) -> dict[str, RunResult]:
        """The flow model's runs: uncalibrated, calibrated, tcp."""
        keys = [k for k in self.comparison.get("folders", {}) if k.startswith("flow_")]
        return {k.removeprefix("flow_"): RunResult(self._folder(k)) for k in keys}

    def _read(self, name: str):
        path = self.folder / name
        return read_json(path, object) if path.exists() else None

    def answer_lines(self) -> list[str]:
        """The answer `testbed validate` prints: do the claims hold on packets, does the
        flow model get their gains right, what would settle the rest."""
        from testbed.validate.report.answer import answer_lines
        from testbed.validate.report.model_table import terminal_lines

        return (answer_lines(self.comparison, self._read("wall.json"))
                + terminal_lines(self.comparison.get("flow_models")))

    def summary_lines(self) -> list[str]:
        """Every figure's line (`testbed validate --verbose`)."""
        from testbed.validate.comparison.summary import summary_lines

        wall = self._read("wall.json")
        return summary_lines(self.targets, self._read("sequential.json"),
                             self.comparison.get("judged"), wall and wall["total_s"])
