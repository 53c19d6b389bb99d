"""Plan a validation, then stop when it is conclusive (pure).

The planner sizes the evidence before the fabric starts. A flow-model pilot of the same
scenario (cheap, no root) gives each primary claim's bootstrap standard error at the
pilot's size; a standard error shrinks as 1/sqrt(requests), so the measurement a claim
needs for an interval half-width W is pilot_window * (z * sqrt(2) * se / W)^2, with se
the largest standard error of a primary claim's flow-model gain. sqrt(2) * se stands in
for the standard error of the difference (flow gain - packet gain): var(f - p) = var(f)
+ var(p) - 2 cov(f, p) is 2 var(f) when the packets' gain is as noisy as the model's and
the two do not covary. (On the demo the measured difference's half-width was 1.1-1.6x
the pilot's se-based figure without the sqrt(2): pairing by request removes less than it
seems, because the schedulers' decisions diverge between engines.) The looks below do
not rely on it: each judges on the measured spread.

Each run is also one draw of its schedulers' tie-breaks, and more requests do not average
that out: only more runs do. With d the sd of one run's gain across draws (the pilot
measures it as validate/judging/trajectory.py does), S seeds and T modelled seconds in all, the
half-width is z * sqrt(2 se^2 W0 / T + v(d, S)), v = claims.draws_variance = d^2 (1 + 1/D)
/ S (the packets' one draw a seed, the flow model's mean of D): below S = (1 + 1/D)
(z d / W)^2 no window reaches W, and the plan says how many seeds the draws alone need.

The evidence comes in rounds: one round is every scheduler on one more seed (for a
trace workload, one more segment of the trace: `workload.seed_segments`), and the
verdicts are looked at after every round. Looking repeatedly at a growing sample and
stopping when it looks decided inflates the error rate; this module spends the error
budget alpha over the looks with Lan & DeMets' (1983) O'Brien-Fleming-type spending
function alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)), t the share of the planned
maximum evidence seen so far. Look k's intervals use the level 1 - (alpha(t_k) -
alpha(t_{k-1})); by the union bound the chance that any look's interval misses is at most
alpha, whatever the looks' correlation (conservative: group-sequential boundaries that
use the correlation are tighter). Early looks thus need overwhelming evidence, and the
last planned look spends most of alpha. The planned maximum is fixed before the first
look (by the budget), as the spending function requires.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

from testbed.validate.judging.claims import draws_variance
from testbed.validate.judging.stats import z as z_of

ALPHA = 0.05


def obrien_fleming_spent(t: float, alpha: float = ALPHA) -> float:
    """Lan-DeMets O'Brien-Fleming-type alpha spent by information fraction t."""
    if t <= 0:
        return 0.0
    t = min(t, 1.0)
    z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
    return 2.0 - 2.0 * NormalDist().cdf(z / math.sqrt(t))


def look_level(look: int, planned: int, alpha: float = ALPHA) -> float:
    """Confidence level of look `look` (1-based) of at most `planned` equal rounds."""
    if not 1 <= look <= planned:
        raise ValueError(f"look {look} outside 1..{planned}")
    spent = (obrien_fleming_spent(look / planned, alpha)
             - obrien_fleming_spent((look - 1) / planned, alpha))
    return 1.0 - spent


@dataclass(frozen=True)
class Plan:
    rounds: int  # planned maximum rounds (seeds) under the budget
    window_s: float  # measurement window per round, modelled seconds
    needed_window_s: float  # modelled measurement the target half-width needs, in all
    round_wall_s: float  # expected wall time of one round (every scheduler once)
    setup_wall_s: float  # fabric, calibration, flow model and report, once
    budget_s: float
    target_half_width: float
    limited_by: str  # "target" (the plan reaches it), "budget" or "rounds"
    lanes: int = 1  # fabrics side by side: each round runs this many seeds at once
    draw_sd: float = 0.0  # the pilot's sd of one run's gain across draws

    @property
    def expected_wall_s(self) -> float:
        return self.setup_wall_s + self.rounds * self.round_wall_s

    def as_dict(self) -> dict:
        return {"rounds": self.rounds, "window_s": self.window_s,
                "needed_window_s": (self.needed_window_s if math.isfinite(self.needed_window_s)
                                    else None),  # None: no window reaches the target
                "round_wall_s": self.round_wall_s,
                "setup_wall_s": self.setup_wall_s, "budget_s": self.budget_s,
                "target_half_width": self.target_half_width, "limited_by": self.limited_by,
                "lanes": self.lanes, "expected_wall_s": self.expected_wall_s,
                "draw_sd": self.draw_sd, "seeds_for_draws": self.seeds_for_draws}

    @property
    def seeds_for_draws(self) -> int:
        """Seeds below which the draws alone keep the target out of reach (at 95%)."""
        return seeds_for_draws(self.draw_sd, self.target_half_width, 0.95)


def seeds_for_draws(draw_sd: float, half_width: float, level: float) -> int:
    if draw_sd <= 0 or math.isnan(draw_sd):
        return 1
    return max(1, math.ceil(draws_variance(draw_sd, 1) / (half_width / z_of(level)) ** 2))


def needed_window(pilot_window_s: float, pilot_se: float, half_width: float,
                  level: float, draw_sd: float = 0.0, seeds: int = 1) -> float:
    """Modelled measurement seconds for a half-width, from a pilot's SE at its window,
    over `seeds` runs whose gains also spread by `draw_sd` across draws (inf: those
    seeds cannot reach it)."""
    if pilot_se <= 0 or math.isnan(pilot_se):
        return pilot_window_s
    room = (half_width / z_of(level)) ** 2 - draws_variance(draw_sd, seeds)
    if room <= 0:
        return math.inf
    return pilot_window_s * 2.0 * pilot_se ** 2 / room


def plan(pilot_window_s: float, pilot_se: float, half_width: float, budget_s: float,
         round_wall: Callable[[float], float], setup_wall_s: float, min_window_s: float,
         max_window_s: float, max_rounds: int = 8, lanes: int = 1,
         draw_sd: float = 0.0) -> Plan:
    """Rounds x window. Each round costs a warm-up, worker start and drain per scheduler,
    so the plan takes the fewest rounds whose total window reaches the target at the last
    look's level: two when a window may be long enough (the first look can stop early),
    more only when the window would exceed max_window_s. When that does not fit in the
    budget: as much measurement as the budget buys ("budget"), or as max_rounds rounds
    of the longest window hold ("rounds": the trace has no more segments).
    `round_wall(window_s)`, increasing, is the expected wall time of one round; with
    `lanes` fabrics side by side a round measures `lanes` seeds in that time;
    `draw_sd`: how far one run's gain moves across draws (module docstring)."""
    need = math.nan
    for rounds in range(min(2, max_rounds), max_rounds + 1):
        need = needed_window(pilot_window_s, pilot_se, half_width, look_level(rounds, rounds),
                             draw_sd, rounds * lanes)
        window = min(max(need / (rounds * lanes), min_window_s), max_window_s)
        if window * rounds * lanes >= need:
            if setup_wall_s + rounds * round_wall(window) <= budget_s:
                return Plan(rounds, window, need, round_wall(window), setup_wall_s, budget_s,
                            half_width, "target", lanes, draw_sd)
            break
    # out of reach: the most measurement the budget (or the rounds the trace has) buys.
    # Not the narrowest interval by the formula above: that would buy more, shorter
    # rounds against the draws, but a round's window is also what is measured (at 100%
    # load a backlog needs time to build), and on the demo 3 rounds of 14 s left every
    # gain unresolved on packets where one round of 68 s resolved them all
    best = None
    for rounds in range(1, max_rounds + 1):
        window = _window_for(round_wall, (budget_s - setup_wall_s) / rounds, min_window_s,
                             max_window_s)
        if window is not None and (best is None or rounds * window > best[0] * best[1] + 1e-9):
            best = (rounds, window)
    rounds, window = best or (1, min_window_s)
    why = "rounds" if window >= max_window_s and rounds == max_rounds else "budget"
    return Plan(rounds, window, need, round_wall(window), setup_wall_s, budget_s, half_width,
                why, lanes, draw_sd)


def _window_for(round_wall, wall_s: float, lo: float, hi: float) -> float | None:
    """The longest window in [lo, hi] whose round fits in wall_s (round_wall increases)."""
    if round_wall(lo) > wall_s:
        return None
    if round_wall(hi) <= wall_s:
        return hi
    for _ in range(40):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if round_wall(mid) <= wall_s else (lo, mid)
    return lo


def stop_reason(conclusive: bool, half_widths_met: bool, look: int, planned: int,
                spent_s: float, next_round_s: float, budget_s: float) -> str | None:
    """Why to stop after this look, or None to run another round."""
    if conclusive:
        return "conclusive: every primary claim is agree or disagree"
    if half_widths_met:
        return ("target width reached: every primary interval is as narrow as asked, and "
                "those still inconclusive sit on the tolerance's edge")
    if look >= planned:
        return "planned rounds done"
    if spent_s + next_round_s > budget_s:
        return "budget spent: another round would not fit"
    return None


def need_words(plan: dict) -> str:
    """What the target needs, in words, from a plan's record (sequential.Plan.as_dict)."""
    draws = (f"one run's gain moves {100 * plan['draw_sd']:.1f} points across draws, so "
             f"{plan['seeds_for_draws']} seeds at least"
             if plan.get("draw_sd") else "")
    if plan["needed_window_s"] is None:
        return f"is out of reach in {plan['rounds']} round(s): {draws}"
    return (f"needs ~{plan['needed_window_s']:.0f} s of measurement in all"
            + (f" ({draws})" if draws else ""))


def seeds_to_settle(low: float, high: float, seeds: int, tolerance: float,
                    most: int = 10_000) -> int | None:
    """Seeds in all at which an inconclusive difference [low, high], measured on `seeds`
    seeds, would be expected to settle: its interval narrowed as 1/sqrt(seeds) (both the
    requests' and the draws' parts shrink so) around the same centre until it clears the
    nearer edge of the +-tolerance band. None where the centre sits on the band's edge
    (no number of seeds is expected to settle it) or it would take over `most`."""
    if math.isnan(low) or math.isnan(high) or seeds < 1:
        return None
    centre, half = (low + high) / 2.0, (high - low) / 2.0
    room = abs(tolerance - abs(centre))
    if half <= room:
        return seeds
    if room <= 1e-9:
        return None
    need = math.ceil(seeds * (half / room) ** 2)
    return need if need <= most else None
