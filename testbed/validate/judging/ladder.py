"""Whether a verdict has stopped moving with the replica's scale (pure).

A rung is one validation of a scenario at one `ns3.scale`. Two rungs run independent
seeds, so a claim's change between them is the finer rung's figure less the coarser's
with their standard errors added in quadrature. The change is judged as the claims are:
the rungs *agree* when the whole interval of the change lies within the band,
*disagree* when it lies wholly outside, and are *inconclusive* otherwise: two point
estimates a point apart say nothing when each is ten points wide.

Two figures are compared per claim: the gain on packets (what a user reads as the answer;
widened by the packets' draws, the one run a seed being one draw of the schedulers'
tie-breaks, with the flow model's draw sd standing in for the packets' as in
claims.with_draws), and the claim itself (the flow model's gain minus the packets', already
widened by the draws)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from testbed.validate.judging.decision import Verdict, agreement
from testbed.validate.judging.stats import CONFIDENCE, Interval, z
from testbed.validate.judging.targets import GAIN_TOLERANCE


def interval(d: Mapping) -> Interval:
    """An Interval from its record (comparison.json's {"point", "low", "high", "se"})."""
    return Interval(float(d["point"]), float(d["low"]), float(d["high"]), d.get("n"),
                    None if d.get("se") is None else float(d["se"]))


def _se(iv: Interval, level: float) -> float:
    """The interval's standard error: its own where recorded, else its half-width at
    `level`."""
    if iv.se is not None and not math.isnan(iv.se):
        return iv.se
    return iv.half_width / z(level)


def with_packet_draws(gain: Interval, draw_sd: float, seeds: int,
                      level: float = CONFIDENCE) -> Interval:
    """The packets' gain widened by its draws: one run a seed over `seeds` seeds adds
    draw_sd^2 / seeds to its variance."""
    if seeds < 1 or math.isnan(draw_sd) or math.isnan(gain.low):
        return gain
    extra = draw_sd / math.sqrt(seeds)
    se = math.hypot(_se(gain, level), extra)
    grow = z(level) * extra
    return Interval(gain.point, gain.point - math.hypot(gain.point - gain.low, grow),
                    gain.point + math.hypot(gain.high - gain.point, grow), gain.n, se)


def change(coarse: Interval, fine: Interval, level: float = CONFIDENCE) -> Interval:
    """fine - coarse, two independent estimates: a normal interval at `level`."""
    if math.isnan(coarse.low) or math.isnan(fine.low):
        return Interval(fine.point - coarse.point, math.nan, math.nan, se=math.nan)
    se = math.hypot(_se(coarse, level), _se(fine, level))
    point = fine.point - coarse.point
    half = z(level) * se
    return Interval(point, point - half, point + half, se=se)


@dataclass(frozen=True)
class Step:
    """One claim between two rungs: its change and the verdict on it."""

    claim: str
    figure: str  # "packets gain" | "flow - packets"
    coarse: float  # ns3.scale of each rung
    fine: float
    change: Interval
    verdict: Verdict

    def as_dict(self) -> dict:
        return {"claim": self.claim, "figure": self.figure, "coarse": self.coarse,
                "fine": self.fine, "change": self.change.as_dict(), "verdict": self.verdict}


def finest_two(scales: Sequence[float]) -> tuple[float, float] | None:
    """The two finest rungs (coarser first), or None with fewer than two."""
    ordered = sorted(set(scales))
    return (ordered[-2], ordered[-1]) if len(ordered) >= 2 else None


def ladder_steps(rungs: Mapping[float, Mapping[str, Mapping[str, Interval]]],
                 tolerance: float = GAIN_TOLERANCE, level: float = CONFIDENCE) -> list[Step]:
    """rungs[scale][claim][figure] = the figure's interval at that rung (figures as in
    Step.figure); every claim both of the two finest rungs judged, each figure, its
    change and verdict."""
    pair = finest_two(list(rungs))
    if pair is None:
        return []
    coarse, fine = pair
    steps = []
    for claim in sorted(set(rungs[coarse]) & set(rungs[fine])):
        for figure in sorted(set(rungs[coarse][claim]) & set(rungs[fine][claim])):
            moved = change(rungs[coarse][claim][figure], rungs[fine][claim][figure], level)
            steps.append(Step(claim, figure, coarse, fine, moved, agreement(moved, tolerance)))
    return steps
