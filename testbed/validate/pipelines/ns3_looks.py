"""An interim look of ns-3's rounds: the claims the stop reads, judged on every seed so far
at the look's level, and nothing the report alone needs.

A look of the sequential validation on ns-3 (ns3_rounds.py) asks one thing: is every
mean-TTFT claim conclusive yet? That takes the verdict's flow model on every seed and its
draws (trajectory.py), paired with the packets (verdicts.point_claims), and no replay,
term run, plot or report: those come once, from the full judging after the last look
(pipeline.judge), which makes the same claims from the same runs. And since a seed's
flow-model runs do not depend on the others', each look runs only the seeds it adds:
judging grows with the seeds, not with the seeds times the looks.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from testbed.runner import run_simulated
from testbed.validate.comparison.sections import cells_of
from testbed.validate.comparison.verdicts import faithful_cells, point_claims
from testbed.validate.engines.contention import with_probe_fits
from testbed.validate.engines.flow_match import flow_scenario
from testbed.validate.judging import trajectory
from testbed.workloads.build import seed_groups

LOOKS = "looks"  # under the validation folder while the rounds run; gone after them


class Looks:
    """The verdict's flow model on the seeds judged so far, kept from look to look."""

    def __init__(self, ns3_scenario, folder: Path, calibration: dict, executor=None):
        cal = with_probe_fits(ns3_scenario, calibration)
        factors = {int(k): float(v) for k, v in cal["capacity_factor"].items()}
        self.matched = flow_scenario(ns3_scenario, factors, cal.get("tcp", {}))
        self.folder = folder / LOOKS
        self.executor = executor
        self.flow: Path | None = None  # the flow model's one run folder, seeds added
        self.draws: dict[str, dict[int, dict]] = {}  # point -> seed -> its draws
        self.done = 0

    def claims(self, packets: Path, now: int, level: float) -> dict:
        """point -> its claims (verdicts.point_claims) on the first `now` seeds, at
        `level` with normal intervals, as the full judging makes them."""
        matched = self.matched.with_overrides({"seeds": now})
        new = range(matched.seed + self.done, matched.seed + now)
        self._run(matched, new)
        for point, got in trajectory.by_seed(matched, new, executor=self.executor).items():
            self.draws.setdefault(point, {}).update(got)
        self.done = now
        spreads = {point: trajectory.pooled(dict(sorted(got.items())))
                   for point, got in self.draws.items()}
        return point_claims(faithful_cells(cells_of(packets))[0], cells_of(self.flow), level,
                            normal=True, draws=spreads, group_of=seed_groups(matched))

    def _run(self, matched, seeds: range) -> None:
        run = run_simulated(matched, self.folder / ("more" if self.flow else ""),
                          executor=self.executor, seeds=seeds).folder
        if self.flow is None:
            self.flow = run
            return
        for seed_dir in sorted(run.glob("cells/*/*/seed*")):
            dest = self.flow / seed_dir.relative_to(run)
            dest.parent.mkdir(parents=True, exist_ok=True)
            seed_dir.rename(dest)
        shutil.rmtree(self.folder / "more")

    def close(self) -> None:
        """The looks' runs are not the record (the full judging's are): remove them."""
        shutil.rmtree(self.folder, ignore_errors=True)
