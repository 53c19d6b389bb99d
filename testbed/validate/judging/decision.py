"""Every verdict a validation reaches, as one enum, and the rules that reach them (pure).

The words that explain a verdict are apart (validate/judging/words.py), so a rule can be read,
tested and changed without the sentences, and a sentence without the rule."""

from __future__ import annotations

import math
from enum import StrEnum

from testbed.validate.judging import targets
from testbed.validate.judging.stats import Interval

HIGHER_IS_BETTER = {"ttft_mean": False, "ttft_p99": False, "slo": True}  # per claim metric


class Verdict(StrEnum):
    """A value is its word in the records (comparison.json keeps the strings)."""

    # the flow model against packets, within a tolerance band
    AGREE = "agree"
    DISAGREE = "disagree"
    INCONCLUSIVE = "inconclusive"
    # a gain on packets
    HOLDS = "holds"
    REVERSED = "reversed"
    UNRESOLVED = "unresolved"
    # a target
    MET = "met"
    MISSED = "missed"
    NOT_JUDGED = "not judged"
    # a missed per-transfer target, read against packets' own floor
    WITHIN_REACH = "within reach"
    OUT_OF_REACH = "out of reach"
    UNDECIDED = "undecided"
    FLOOR_NOT_MEASURED = "floor not measured"


def _nan(x) -> bool:
    return x is None or x != x


def agreement(diff: Interval, tolerance: float = targets.GAIN_TOLERANCE) -> Verdict:
    """An equivalence test on a difference: agree when its whole interval lies within
    +-tolerance, disagree when wholly outside, inconclusive otherwise."""
    if math.isnan(diff.low):
        return Verdict.INCONCLUSIVE
    if -tolerance <= diff.low and diff.high <= tolerance:
        return Verdict.AGREE
    if diff.low > tolerance or diff.high < -tolerance:
        return Verdict.DISAGREE
    return Verdict.INCONCLUSIVE


def on_packets(gain: Interval, higher_is_better: bool) -> Verdict:
    """A gain holds when its interval lies wholly on the better side of zero, is reversed
    when wholly on the worse side, and is unresolved otherwise."""
    if math.isnan(gain.low):
        return Verdict.UNRESOLVED
    better = gain.low > 0 if higher_is_better else gain.high < 0
    worse = gain.high < 0 if higher_is_better else gain.low > 0
    return Verdict.HOLDS if better else (Verdict.REVERSED if worse else Verdict.UNRESOLVED)


def ttft_agreement(iv: Interval, target: float = targets.TTFT_ERROR,
                   bound: float = targets.TTFT_CI,
                   min_n: int = targets.MIN_REQUESTS) -> Verdict:
    """One scheduler's mean-TTFT error: agree when the point is within the target and the
    whole interval within the bound; disagree when the interval lies beyond the target;
    inconclusive with too few requests or an interval across it."""
    if (iv.n or 0) < min_n or math.isnan(iv.point):
        return Verdict.INCONCLUSIVE
    if abs(iv.point) <= target and max(abs(iv.low), abs(iv.high)) <= bound:
        return Verdict.AGREE
    if iv.low > target or iv.high < -target:
        return Verdict.DISAGREE
    return Verdict.INCONCLUSIVE


# per-transfer target -> (its target key, the model's figure, packets' floor, its interval);
# "engines": both engines deciding, against packets deciding again
REACH_KEYS = {"median": ("transfer_target", "replay_median_abs_transfer_error",
                         "packets_median_abs_transfer_error", "packets_median_ci"),
              "p90": ("transfer_p90_target", "replay_p90_abs_transfer_error",
                      "packets_p90_abs_transfer_error", "packets_p90_ci"),
              "engines": ("engines_target", "engines_median_abs_transfer_error",
                          "packets_engines_median_abs_transfer_error",
                          "packets_engines_median_ci")}


def reach(t: dict, which: str = "p90") -> Verdict:
    """The replay's median or p90 target, or both engines' median, read against packets'
    own floor (repeat.py): a deterministic model cannot be judged closer to packets than
    packets are to themselves, so a miss is within reach (the floor's interval wholly under the target),
    out of reach (wholly over), undecided (across it) or floor not measured."""
    target_key, replay_key, floor_key, ci_key = REACH_KEYS[which]
    target, got = t[target_key], t[replay_key]
    if _nan(got):
        return Verdict.NOT_JUDGED
    if got <= target:
        return Verdict.MET
    if t.get(floor_key) is None:
        return Verdict.FLOOR_NOT_MEASURED
    ci = t.get(ci_key)
    if ci and ci[0] > target:
        return Verdict.OUT_OF_REACH
    if ci and ci[1] <= target:
        return Verdict.WITHIN_REACH
    return Verdict.UNDECIDED


def at_most(value, target: float) -> Verdict:
    """A figure against its upper target."""
    if _nan(value):
        return Verdict.NOT_JUDGED
    return Verdict.MET if value <= target else Verdict.MISSED


def every_seed(same: int, seeds: int) -> Verdict:
    """The same ranking in every seed judged."""
    if not seeds:
        return Verdict.NOT_JUDGED
    return Verdict.MET if same == seeds else Verdict.MISSED


def all_of(verdicts) -> Verdict:
    """Several agreement verdicts as one: disagree if any disagrees, agree if every one
    agrees, inconclusive otherwise (or with none)."""
    verdicts = list(verdicts)
    if Verdict.DISAGREE in verdicts:
        return Verdict.DISAGREE
    if verdicts and all(v == Verdict.AGREE for v in verdicts):
        return Verdict.AGREE
    return Verdict.INCONCLUSIVE
