"""The paper's claims, judged on both engines (pure): each scheduler's gain over RR and
CLA*, with intervals, and whether the flow model's gain is the packets' gain.

A claim is "scheduler S cuts metric M against baseline B". Its gain is measured on the
*same requests* in every run of a sweep point: both engines replay one workload per seed,
so request r has a TTFT under each scheduler in each engine. Pairing by request removes
the variance that comes from which requests arrived (long prompts, bursts): what is left
is how the schedulers and engines treat the same request. Every statistic of a resample
(mean and P99 TTFT, SLO attainment; per scheduler and engine; gains; the difference of
gains across engines; the ranking) is computed on one resampled set of requests, so all
pairings hold inside every resample.

Requests of one run are not independent: a burst or a backlog touches its neighbours. So
the resampling unit is a block of requests consecutive in arrival order (a
non-overlapping block bootstrap, Carlstein 1986; Kuensch 1989 for the moving-block
variant; block length n^(1/3), Hall, Horowitz & Jing 1995), drawn within each seed so
every seed keeps its share. Intervals are percentile intervals at 95%, or, at an interim
look of a sequential validation, normal intervals from the bootstrap standard error at
the look's own level (`testbed/validate/judging/sequential.py`).

Verdicts, per claim:
- on packets: the gain *holds* (interval entirely on the better side of 0), is
  *reversed* (entirely on the worse side), or is *unresolved*;
- across engines (the claim's verdict): the flow model's gain minus the packets' gain,
  *agree* when the whole interval lies within +-GAIN_TOLERANCE (an equivalence test: two
  one-sided tests at the interval's level), *disagree* when it lies entirely outside it,
  *inconclusive* otherwise;
- at the packets' own decisions (when the replay is given): the replay's gain minus the
  packets', judged the same way. The replay sees exactly the transfers the packets carried,
  so the schedulers' diverging decisions (most of the engines' difference's spread) drop
  out and what is left is the network model's error on the gain. It is a second verdict,
  not a control variate for the first: a control variate needs a known mean, and the
  replay exists only where packets ran.

One run is one draw. The intervals above resample requests; the same requests met with
other draws (the schedulers' tie-breaks) give another gain, and each packet run is one
such draw. The flow model is cheap to draw again: validate/judging/trajectory.py runs each seed's
requests with FLOW_DRAWS draws, which give the sd of one draw's gain and the flow model's
mean gain over them. So where they are given, a mean-TTFT claim's verdict is taken on the
difference of the flow model's mean gain (the paired point moved by the mean of the draws
less the seed's own draw) and the packets' one draw, widened by both draws' spread: each
side grows to sqrt(side^2 + z^2 * sd^2 * (1 + 1/D) / S) for S seeds pooled and D flow
draws a seed (draws_variance), the packets' draw assumed to spread as the flow model's
(two packet runs of the demo's requests moved about as much: docs/validation.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import permutations

import numpy as np

from testbed.lifecycle import SERVED_STATES
from testbed.validate.judging.decision import HIGHER_IS_BETTER, Verdict, agreement, on_packets
from testbed.validate.judging.stats import (
    CONFIDENCE,
    RESAMPLES,
    Interval,
    block_weights,
    estimate,
    weighted_mean,
    weighted_quantile,
    z,
)
from testbed.validate.judging.targets import GAIN_TOLERANCE
from testbed.validate.judging.words import claim_sentence

BASELINES = ("rr", "cla")
METRICS = ("ttft_mean", "ttft_p99", "slo")
PRIMARY = "ttft_mean"  # the claims a sequential validation must resolve
ENGINES = ("packets", "flow")
REPLAY = "replay"  # the flow model on the packets' own transfers (validate/engines/flow_replay.py)
FLOW_DRAWS = 6  # the flow model's runs of each seed's requests: its own draw and five more


@dataclass(frozen=True)
class Paired:
    """Requests measured in every run of one sweep point, in arrival order per seed:
    ttft[i, e, s] (seconds; NaN if not served) and met[i, e, s] (the SLO met) for engine e
    of `engines` (ENGINES, then REPLAY when replayed) and scheduler s of `schedulers`."""

    schedulers: tuple[str, ...]
    ids: tuple[str, ...]
    seeds: np.ndarray  # (n,) the seed of each request
    ttft: np.ndarray  # (n, E, S)
    met: np.ndarray  # (n, E, S)
    engines: tuple[str, ...] = ENGINES
    groups: np.ndarray | None = None  # (n,) the workload of each request's seed (None: its seed)

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def blocks(self) -> np.ndarray:
        """What the bootstrap draws blocks within: seeds that replay one workload (draws
        of it: workload.segments) are one group, their requests shared."""
        return self.seeds if self.groups is None else self.groups


def served(row: dict) -> bool:
    return row.get("state") in SERVED_STATES and row.get("ttft") not in (None, "")


def _truthy(value) -> bool:
    return str(value).lower() in ("true", "1")


def pair_requests(runs: dict[tuple[str, str, int], Sequence[dict]],
                  group_of: Mapping[int, int] | None = None) -> Paired:
    """runs[(engine, scheduler, seed)] = requests.csv rows of one sweep point. Keeps the
    measured requests that every engine x scheduler run of their seed recorded. Runs of
    engine REPLAY (the packets' requests with the replay's transfer ends) are optional.
    `group_of`: seed -> the seed whose workload it replays (workload_seed), where seeds
    are draws of fewer workloads."""
    schedulers = tuple(sorted({s for _, s, _ in runs}))
    seeds = sorted({k for _, _, k in runs})
    engines = ENGINES + ((REPLAY,) if any(e == REPLAY for e, _, _ in runs) else ())
    ids, seed_of, ttft, met = [], [], [], []
    for seed in seeds:
        tables = {}
        for e in engines:
            for s in schedulers:
                rows = runs.get((e, s, seed))
                if rows is None:
                    break
                tables[(e, s)] = {str(r["id"]): r for r in rows if _truthy(r.get("measured"))}
        if len(tables) != len(engines) * len(schedulers):
            continue  # a seed some run lacks: nothing to pair
        common = set.intersection(*(set(t) for t in tables.values()))
        first = tables[(ENGINES[0], schedulers[0])]
        for rid in sorted(common, key=lambda r: (float(first[r]["arrival"]), r)):
            ids.append(rid)
            seed_of.append(seed)
            ttft.append([[float(tables[(e, s)][rid]["ttft"]) if served(tables[(e, s)][rid])
                          else math.nan for s in schedulers] for e in engines])
            met.append([[1.0 if _truthy(tables[(e, s)][rid].get("slo_met")) else 0.0
                         for s in schedulers] for e in engines])
    shape = (0, len(engines), len(schedulers))
    groups = None if group_of is None else np.asarray([group_of.get(k, k) for k in seed_of],
                                                      dtype=int)
    return Paired(schedulers, tuple(ids), np.asarray(seed_of, dtype=int),
                  np.asarray(ttft, dtype=float).reshape(shape) if not ttft else np.asarray(ttft),
                  np.asarray(met, dtype=float).reshape(shape) if not met else np.asarray(met),
                  engines, groups)


def statistics(p: Paired, w: np.ndarray) -> dict[str, np.ndarray]:
    """Per resample (rows of w): metric -> (R, engines, schedulers)."""
    out = {"ttft_mean": weighted_mean(w, p.ttft), "slo": weighted_mean(w, p.met)}
    p99 = np.empty((w.shape[0], len(p.engines), len(p.schedulers)))
    for e in range(len(p.engines)):
        for s in range(len(p.schedulers)):
            p99[:, e, s] = weighted_quantile(w, p.ttft[:, e, s], 0.99)
    out["ttft_p99"] = p99
    return out


def gain(metric: str, value: np.ndarray, base: np.ndarray) -> np.ndarray:
    """TTFT: relative change (negative = faster); SLO attainment: change in points."""
    if HIGHER_IS_BETTER[metric]:
        return value - base
    with np.errstate(invalid="ignore", divide="ignore"):
        return value / base - 1.0


@dataclass
class Claim:
    scheduler: str
    baseline: str
    metric: str
    packets: Interval
    flow: Interval
    difference: Interval  # flow gain - packet gain
    n: int
    on_packets: Verdict = Verdict.UNRESOLVED  # holds | reversed | unresolved
    verdict: Verdict = Verdict.INCONCLUSIVE  # agree | disagree | inconclusive
    sentence: str = ""
    network: Interval | None = None  # replay gain - packet gain (same decisions)
    network_verdict: str = ""
    replay: Interval | None = None  # the replay's gain
    draws: Interval | None = None  # the difference widened by the draws' spread (with_draws)

    def as_dict(self) -> dict:
        out = {"scheduler": self.scheduler, "baseline": self.baseline,
               "metric": self.metric, "n": self.n, "packets": self.packets.as_dict(),
               "flow": self.flow.as_dict(), "difference": self.difference.as_dict(),
               "on_packets": self.on_packets, "verdict": self.verdict,
               "sentence": self.sentence}
        if self.network is not None:
            out["network"] = self.network.as_dict()
            out["network_verdict"] = self.network_verdict
            out["replay"] = self.replay.as_dict() if self.replay else None
        if self.draws is not None:
            out["difference_with_draws"] = self.draws.as_dict()
        return out


@dataclass(frozen=True)
class DrawSpread:
    """One claim's draw-to-draw spread in the flow model (validate/judging/trajectory.py): `sd` of
    one draw's gain, `flow_draws` draws a seed, and per seed the mean of its draws' gains
    less its own draw's (`shifts`: the seed's own draw is the run the claims pair)."""

    sd: float
    flow_draws: int = 1
    shifts: dict[int, float] = field(default_factory=dict)

    def shift(self, seeds) -> float:
        """The mean shift over the seeds judged (those measured)."""
        got = [self.shifts[s] for s in sorted({int(s) for s in seeds}) if s in self.shifts]
        return float(np.mean(got)) if got else 0.0


def draws_variance(sd: float, seeds: int, flow_draws: int = FLOW_DRAWS) -> float:
    """Variance the draws add to the engines' difference of gains: the packets' one draw a
    seed (sd^2) and the flow model's mean over `flow_draws` (sd^2 / flow_draws), averaged
    over `seeds` seeds."""
    return sd * sd * (1.0 + 1.0 / max(1, flow_draws)) / seeds


def with_draws(diff: Interval, spread: DrawSpread, seeds, level: float = CONFIDENCE
               ) -> Interval:
    """The difference of gains across engines taken on the flow model's mean over its
    draws and widened by both engines' draws (see the module's docstring); `seeds`: the
    seeds pooled."""
    seeds = [int(s) for s in np.unique(np.asarray(seeds))]
    if math.isnan(diff.low) or math.isnan(spread.sd) or not seeds:
        return diff
    sd = math.sqrt(draws_variance(spread.sd, len(seeds), spread.flow_draws))
    extra = z(level) * sd
    point = diff.point + spread.shift(seeds)
    return Interval(point, point - math.hypot(diff.point - diff.low, extra),
                    point + math.hypot(diff.high - diff.point, extra),
                    se=math.hypot(diff.se, sd))


@dataclass
class PointClaims:
    claims: list[Claim] = field(default_factory=list)
    ranking: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)  # metric -> engine -> scheduler -> Interval
    n: int = 0

    def as_dict(self) -> dict:
        return {"n": self.n, "claims": [c.as_dict() for c in self.claims],
                "ranking": self.ranking,
                "values": {m: {e: {s: v.as_dict() for s, v in by.items()}
                               for e, by in d.items()} for m, d in self.values.items()}}


def judge_point(p: Paired, level: float = CONFIDENCE, normal: bool = False,
                resamples: int = RESAMPLES, tolerance: float = GAIN_TOLERANCE,
                spreads: dict[str, DrawSpread] | None = None) -> PointClaims:
    """Every claim of one sweep point: each non-baseline scheduler (and CLA* against RR)
    against each baseline present, on every metric; the ranking by mean TTFT.
    `spreads`: "S vs B" -> its mean-TTFT gain's spread across the flow model's draws
    (trajectory.draw_spreads): those claims are judged with it (with_draws)."""
    out = PointClaims(n=p.n)
    if p.n == 0:
        return out
    ones = np.ones((1, p.n))
    w = block_weights(p.blocks, resamples, keys=None if p.groups is None else p.ids)
    at = statistics(p, ones)
    draws = statistics(p, w)
    idx = {s: i for i, s in enumerate(p.schedulers)}
    for m in METRICS:
        out.values[m] = {e: {s: estimate(float(at[m][0, ei, si]), draws[m][:, ei, si], level,
                                         normal)
                             for s, si in idx.items()} for ei, e in enumerate(p.engines)}
    for s, base in claim_pairs(p.schedulers):
        for m in METRICS:
            g_at = gain(m, at[m][0, :, idx[s]], at[m][0, :, idx[base]])
            g = gain(m, draws[m][:, :, idx[s]], draws[m][:, :, idx[base]])
            pk = estimate(float(g_at[0]), g[:, 0], level, normal)
            fl = estimate(float(g_at[1]), g[:, 1], level, normal)
            diff = estimate(float(g_at[1] - g_at[0]), g[:, 1] - g[:, 0], level, normal)
            c = Claim(s, base, m, pk, fl, diff, p.n, on_packets(pk, HIGHER_IS_BETTER[m]),
                      agreement(diff, tolerance))
            spread = (spreads or {}).get(f"{s} vs {base}") if m == PRIMARY else None
            if spread is not None:
                c.draws = with_draws(diff, spread, p.seeds, level)
                c.verdict = agreement(c.draws, tolerance)
            if REPLAY in p.engines:
                r = p.engines.index(REPLAY)
                c.network = estimate(float(g_at[r] - g_at[0]), g[:, r] - g[:, 0], level,
                                     normal)
                c.network_verdict = agreement(c.network, tolerance)
                c.replay = estimate(float(g_at[r]), g[:, r], level, normal)
            c.sentence = claim_sentence(c)
            out.claims.append(c)
    two = len(ENGINES)  # the ranking compares the engines, not the replay
    out.ranking = ranking_probability(p.schedulers, at["ttft_mean"][0][:two],
                                      draws["ttft_mean"][:, :two])
    return out


def claim_pairs(schedulers: Sequence[str]) -> list[tuple[str, str]]:
    """(scheduler, baseline) of every claim among `schedulers`: each against RR and CLA*,
    RR vs CLA* left out (it is CLA* vs RR read backwards)."""
    return [(s, base) for base in BASELINES if base in schedulers for s in schedulers
            if s != base and not (s in BASELINES
                                  and BASELINES.index(s) < BASELINES.index(base))]


def _order(scores: np.ndarray, names: Sequence[str]) -> tuple[str, ...]:
    return tuple(names[i] for i in np.lexsort((np.arange(len(names)), scores)))


def ranking_probability(names: Sequence[str], point: np.ndarray, draws: np.ndarray) -> dict:
    """Ranking by mean TTFT (best first) per engine, and how often the resamples give
    it: the share where each engine keeps its order, and where both engines' orders are
    the same."""
    names = tuple(names)
    if len(names) < 2:
        return {}
    orders = {e: _order(point[ei], names) for ei, e in enumerate(ENGINES)}
    ok = ~np.isnan(draws).any(axis=(1, 2))
    ranks = np.argsort(np.argsort(draws[ok], axis=2, kind="stable"), axis=2, kind="stable")
    same = {}
    for ei, e in enumerate(ENGINES):
        want = np.array([orders[e].index(s) for s in names])
        same[e] = float((ranks[:, ei, :] == want).all(axis=1).mean()) if ok.any() else math.nan
    both = float((ranks[:, 0, :] == ranks[:, 1, :]).all(axis=1).mean()) if ok.any() else math.nan
    agree = orders["packets"] == orders["flow"]
    top = {}
    for perm in permutations(range(len(names))):
        if len(names) > 4:
            break  # 120+ orders: only the point orders are reported
        hits = float((ranks[:, 0, :] == np.array(perm)).all(axis=1).mean()) if ok.any() else 0.0
        if hits > 0:
            top[" < ".join(names[i] for i in np.argsort(perm))] = hits
    return {"packets": list(orders["packets"]), "flow": list(orders["flow"]),
            "same_order": agree, "p_packets_order": same["packets"],
            "p_flow_order": same["flow"], "p_same_order": both,
            "packet_orders": dict(sorted(top.items(), key=lambda kv: -kv[1])[:3])}


def primary(claims: Sequence[Claim]) -> list[Claim]:
    """The claims a sequential validation must resolve: mean TTFT gains."""
    return [c for c in claims if c.metric == PRIMARY]


def counts(claims: Sequence[Claim]) -> dict[str, int]:
    kinds = [c.verdict for c in claims]
    return {k: kinds.count(k) for k in ("agree", "disagree", "inconclusive")}


def replayed_requests(requests: Sequence[dict], packet_transfers: Sequence[dict],
                      replayed: Sequence[dict]) -> list[dict]:
    """A packet run's requests as the replay would have served them: each TTFT moved by
    (the replay's last shard end - the packets' last shard end) for its request, the SLO
    judged again. Decisions, queueing before the transfer and the first decode step stay
    the packets'; a transfer that ends sooner does not change later requests' queueing
    (the knock-on effect is left out, so the figure is the transfers' own error)."""
    def last_end(rows: Sequence[dict]) -> dict[str, float]:
        out: dict[str, float] = {}
        for r in rows:
            key = str(r["request"])
            out[key] = max(out.get(key, -math.inf), float(r["end"]))
        return out

    pk, rp = last_end(packet_transfers), last_end(replayed)
    out = []
    for row in requests:
        rid = str(row["id"])
        if rid in pk and rid in rp and served(row):
            ttft = float(row["ttft"]) + rp[rid] - pk[rid]
            slo = row.get("slo_s")
            met = ttft <= float(slo) if slo not in (None, "") else _truthy(row.get("slo_met"))
            row = {**row, "ttft": ttft, "slo_met": met}
        out.append(row)
    return out
