"""Emulation seeds for ns-3 against the emulation, planned from the first seed.

On both packet engines the emulation is the dear one: a seed of the demo costs minutes
where ns-3's costs seconds. So its seeds are added as the ns-3 rounds add theirs: after
each emulation seed (every scheduler on it), ns-3 runs that seed's cells at the
emulation's placements (the network alone, as the three-way verdict is taken) and the
mean-TTFT claims of ns-3 against the emulation are judged on the seeds in so far, at an
O'Brien-Fleming-spent level of the planned looks. The first look plans: how many seeds
would settle every claim (sequential.seeds_to_settle on its interval), what that costs at
this run's measured time a seed, and how many fit the budget; the run goes on while a
claim is inconclusive, the plan is not done and the next seed fits.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from testbed.model.extensions.plugins import display_name
from testbed.validate.comparison.sections import cells_of
from testbed.validate.comparison.verdicts import faithful_cells, point_claims
from testbed.validate.judging import divergence, sequential
from testbed.validate.judging.claims import PRIMARY
from testbed.validate.judging.targets import GAIN_TOLERANCE

MAX_SEEDS = 16  # emulation seeds a plan may ask for (each is every scheduler's run again)


def primary(gains: dict) -> list[dict]:
    return [c for by in gains.values() for c in by["claims"] if c["metric"] == PRIMARY]


def seeds_to_settle(claims: list[dict], seeds: int) -> int | None:
    """Seeds in all that would settle every inconclusive claim (None: none would)."""
    need = seeds
    for c in claims:
        if c["verdict"] != "inconclusive":
            continue
        d = c["difference"]
        got = sequential.seeds_to_settle(d["low"], d["high"], seeds, GAIN_TOLERANCE)
        if got is None:
            return None
        need = max(need, got)
    return need


@dataclass
class TwinLooks:
    """after_round for the emulation of a validation on both packet engines."""

    scenario: object  # the emulation's scenario, its seeds the most the run may take
    budget_s: float  # wall seconds the emulation's seeds may take in all
    executor: object
    on_look: Callable[[str], None]
    started: float = field(default_factory=time.monotonic)
    planned: int | None = None
    first_look: float = 0.0  # time.monotonic() of the first look
    looks: list = field(default_factory=list)
    reason: str = ""

    def __call__(self, index: int, seeds: list[int], root: Path) -> bool:
        from testbed.ns3sim.replayer import emulation_twin
        from testbed.runner import run_simulated

        emu, flagged = faithful_cells(cells_of(root))
        seen = sorted({int(k.rsplit("seed", 1)[1]) for k in cells_of(root)})
        with tempfile.TemporaryDirectory(prefix="netkv-twin-look-") as tmp:
            forced = run_simulated(emulation_twin(self.scenario), Path(tmp), executor=self.executor,
                                 engine="ns3", follow=divergence.recorded(emu),
                                 seeds=seen).folder
            look = len(self.looks) + 1
            level = sequential.look_level(min(look, self.planned or MAX_SEEDS),
                                          self.planned or MAX_SEEDS)
            claims = primary(point_claims(emu, cells_of(forced), level=level))
            if self.planned is None:  # planned on the interval the last look will read
                nominal = primary(point_claims(emu, cells_of(forced)))
        now = time.monotonic()
        elapsed = now - self.started
        if self.looks:  # a seed's cost once the fabric and its calibration are behind
            per_seed = (now - self.first_look) / max(1, len(seen) - self.looks[0]["seeds"])
        else:
            per_seed, self.first_look = elapsed / len(seen), now
        fit = max(len(seen), int(self.budget_s // per_seed)) if per_seed > 0 else len(seen)
        if self.planned is None:
            need = seeds_to_settle(nominal, len(seen)) if nominal else None
            self.planned = min(MAX_SEEDS, fit, need or MAX_SEEDS)
            self.on_look(plan_words(need, per_seed, self.planned, self.budget_s))
        conclusive = bool(claims) and all(c["verdict"] != "inconclusive" for c in claims)
        reason = ("every claim of ns-3 against the emulation conclusive" if conclusive else
                  "planned seeds done" if len(seen) >= self.planned else
                  "the next seed would not fit in the budget"
                  if elapsed + per_seed > self.budget_s else None)
        self.looks.append({"look": look, "seeds": len(seen), "level": level,
                           "unfaithful": flagged, "wall_s": elapsed,
                           "claims": [{k: c[k] for k in ("scheduler", "baseline", "verdict",
                                                         "difference")} for c in claims]})
        verdicts = ", ".join(f"{display_name(c['scheduler'])} vs "
                             f"{display_name(c['baseline'])} {c['verdict']}" for c in claims)
        self.on_look(f"ns-3 vs emulation, look {look} ({len(seen)} seed(s), level "
                     f"{100 * level:.2f}%): {verdicts or 'nothing judged yet'}"
                     + (f"; stopping: {reason}" if reason else ""))
        self.reason = reason or ""
        return reason is None

    def seeds_run(self) -> int:
        return max((x["seeds"] for x in self.looks), default=0)

    def record(self) -> dict:
        return {"planned_seeds": self.planned, "looks": self.looks,
                "reason": self.reason or "planned seeds done", "budget_s": self.budget_s}


def plan_words(need: int | None, per_seed_s: float, planned: int, budget_s: float) -> str:
    cost = ("no number of seeds is expected to settle them" if need is None else
            f"about {need} seed(s) would settle every claim, ~{need * per_seed_s / 60:.0f} "
            f"min of emulation here ({per_seed_s / 60:.1f} min a seed)")
    return (f"ns-3 vs emulation, plan: {cost}; running {planned} seed(s) at most "
            f"(budget {budget_s / 60:.0f} min)")


def seed_wall_s(emu_folder: Path) -> float | None:
    """Wall seconds one emulation seed took (every scheduler's run of it, from its first
    worker start to its last record), the median over the run's seeds."""
    import statistics

    spans: dict[str, list[float]] = {}
    for key, cell in cells_of(emu_folder).items():
        seed = key.rsplit("/", 1)[1]
        ends = [f.stat().st_mtime for f in (cell / "workers.json", cell / "summary.json")
                if f.exists()]
        if len(ends) == 2:
            spans.setdefault(seed, []).extend(ends)
    return statistics.median(max(v) - min(v) for v in spans.values()) if spans else None


def settle_words(claims: list[dict], seeds: int, wall_per_seed_s: float | None) -> str | None:
    """What would settle ns-3 against the emulation, for a run that did not add seeds."""
    if not claims or all(c["verdict"] != "inconclusive" for c in claims):
        return None
    need = seeds_to_settle(claims, seeds)
    if need is None:
        return "ns-3 vs emulation: no number of emulation seeds is expected to settle it"
    more = max(1, need - seeds)
    cost = (f", ~{math.ceil(more * wall_per_seed_s / 60)} min here" if wall_per_seed_s else "")
    return (f"To settle ns-3 vs emulation: about {more} more emulation seeds{cost} "
            "(--emulation-budget).")
