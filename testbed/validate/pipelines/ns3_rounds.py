"""Seeds on ns-3 until the paper's claims are conclusive: the sequential validation there.

A seed of ns-3 costs seconds and repeats exactly, so evidence is bought in seeds, each its
own segment of a trace (`workload.seed_segments`: seeds of one trace segment share its
arrivals and lengths and would be no new requests). Rounds double the seeds (8, 16, 32,
...) up to the segments the trace holds; past them each round is one more pass over the
segments (`workload.segments`: seed k replays segment k mod segments as a new draw of the
schedulers' tie-breaks, which is most of a gain's spread: validate/judging/trajectory.py), its
requests the same requests to the bootstrap (claims.Paired.groups). Each look judges the
claims on every seed so far (ns3_looks.py: the verdict's model and its draws, run once a
seed), and the run stops after the first look at which every primary (mean-TTFT) claim
agrees or disagrees; the full judging (pipeline.judge: every model, the replays, the
report) follows once. The first round's runs are the pilot: their time per seed fixes
the plan, the largest sequence of looks whose runs and judging fit the budget, printed
before any look. The looks spend
alpha = 5% with the emulation's O'Brien-Fleming-type function (sequential.py), the
information fraction being the seeds so far over the planned seeds: look k's intervals
are at level 1 - (alpha(t_k) - alpha(t_k-1)), so by the union bound the chance that any
look's interval misses is at most 5%.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from testbed.records import atomic_write, write_json
from testbed.validate.engines.ns3_cost import (
    JUDGE_S_PER_RUN,
    JUDGING_S_PER_RUN,
    local_workers,
)
from testbed.validate.judging.decision import Verdict
from testbed.validate.judging.sequential import obrien_fleming_spent
from testbed.validate.pipelines.ns3_looks import Looks
from testbed.validate.report.answer import primary_claims, verdict_interval

FIRST_SEEDS = 8
MOST_SEEDS = 1000  # the scenario's own bound on seeds
CONCLUSIVE = (Verdict.AGREE, Verdict.DISAGREE)


def next_look(seeds: int, segments: int | None, most: int = MOST_SEEDS) -> int:
    """Seeds at the look after one at `seeds`: doubling up to the trace's `segments`
    (None: no end), then one more pass over them (each segment one more draw)."""
    if segments is None or 2 * seeds <= segments:
        return min(2 * seeds, most)
    if seeds < segments:
        return segments
    return min(seeds + segments, most)


def judging_s(runs_per_seed: int, workers: int, per_run: float = JUDGING_S_PER_RUN) -> float:
    """A seed's look (the verdict's model and its draws, once: ns3_looks.py) and share of
    the full judging after the last look (every flow model, the replays, the report), in
    wall seconds on `workers` processes: no packets in them, so the same at every scale."""
    return runs_per_seed * per_run / max(1, workers)


def per_seed_s(run_s: float, overhead_s: float) -> float:
    """What a seed costs in all: its runs (wall seconds, measured) and its judging."""
    return run_s + overhead_s


def planned_seeds(first: int, run_s: float, budget_s: float, spent_s: float,
                  segments: int | None = None, most: int = MOST_SEEDS,
                  overhead_s: float = 0.0) -> list[int]:
    """Seeds judged at each planned look (next_look from `first`) while every seed so
    far (per_seed_s) fits in what the budget leaves after `spent_s`."""
    looks = [min(first, most, segments or most)]
    while looks[-1] < most:
        nxt = next_look(looks[-1], segments, most)
        if spent_s + nxt * per_seed_s(run_s, overhead_s) > budget_s:
            break
        looks.append(nxt)
    return looks


def expected_s(looks: list[int], run_s: float, overhead_s: float = 0.0) -> float:
    """The plan's time if every look is taken."""
    return looks[-1] * per_seed_s(run_s, overhead_s)


def look_level(before: int, now: int, planned: int) -> float:
    """The confidence level of a look at `now` seeds after one at `before`."""
    return 1.0 - (obrien_fleming_spent(now / planned) - obrien_fleming_spent(before / planned))


def primary_verdicts(doc: dict) -> list[dict]:
    """The mean-TTFT claims of a judging, each its name, verdict and the interval the
    verdict read."""
    return [{"scheduler": c["scheduler"], "baseline": c["baseline"], "verdict": c["verdict"],
             "difference": verdict_interval(c)} for _, c in primary_claims(doc)]


def _add_seeds(ns3_scenario, folder: Path, packets: Path | None, done: int, now: int, executor,
               on_step) -> Path:
    """Seeds done+1..now of the replica's on ns-3, into the packets' one run folder."""
    from testbed.runner import run_simulated

    run = run_simulated(ns3_scenario.with_overrides({"seeds": now}),
                      folder / ("more" if packets else ""),
                      lambda label: on_step and on_step(label, 0.0), executor=executor,
                      engine="ns3",
                      seeds=range(ns3_scenario.seed + done, ns3_scenario.seed + now)).folder
    if packets is None:
        return run
    for seed_dir in sorted(run.glob("cells/*/*/seed*")):
        dest = packets / seed_dir.relative_to(run)
        dest.parent.mkdir(parents=True, exist_ok=True)
        seed_dir.rename(dest)
    shutil.rmtree(folder / "more")
    return packets


def cycled(ns3_scenario):
    """The replica with every seed its own segment of the trace and, past the segments it
    holds, draws of them (workload.segments); and how many segments that is (None: a
    synthetic workload or a looped trace, whose seeds never run out)."""
    from testbed.workloads.build import segments_available

    if ns3_scenario.workload.synthetic is not None:
        return ns3_scenario, None
    ns3_scenario = ns3_scenario.with_overrides({"workload.seed_segments": True})
    segments = segments_available(ns3_scenario)
    if not segments:  # none, or not one window: the run's own error says so
        return ns3_scenario, segments
    return ns3_scenario.with_overrides({"workload.segments": segments}), segments


def check_segments(ns3_scenario, segments: int | None) -> None:
    """Seeds added on ns-3 need two segments of the trace at least: said before anything
    is made."""
    if segments is not None and segments < 2:
        raise ValueError(f"{ns3_scenario.workload.trace}: the trace holds {segments} segment(s) "
                         "of this window; seeds on ns-3 need two at least: shorten "
                         "workload.warmup_s + measure_s, lower the load, set "
                         "workload.trace_loop (replays are not new requests), or give "
                         "--seeds")


def run_rounds(ns3_scenario, folder: Path, calibration: dict, executor,
               on_step: Callable[[str, float], None] | None, note: Callable[[str], None],
               budget_s: float, phases: dict, started: float) -> None:
    """Rounds of seeds until the primary claims are conclusive, the planned looks are
    done or the next round would not fit; sequential.json records the plan and the looks."""
    from testbed.validate.pipelines.pipeline import judge, publish

    ns3_scenario, segments = cycled(ns3_scenario)
    check_segments(ns3_scenario, segments)
    looks: list[dict] = []
    packets, done, reason = None, 0, "planned rounds done"
    plan = [min(FIRST_SEEDS, segments or MOST_SEEDS)]
    run_s = look_s = 0.0
    lean = Looks(ns3_scenario, folder, calibration, executor)
    workers = local_workers(executor)
    runs_per_seed = sum(len(s.schedulers) for _, s in ns3_scenario.points())
    overhead_s = judging_s(runs_per_seed, workers)
    for k in range(1, 64):
        now = plan[k - 1]
        t = time.monotonic()
        packets = _add_seeds(ns3_scenario, folder, packets, done, now, executor, on_step)
        run_s += time.monotonic() - t
        if k == 1:
            seed_s = run_s / now
            plan = planned_seeds(now, seed_s, budget_s, time.monotonic() - started,
                                 segments, overhead_s=overhead_s)
            passes = (f" (past the trace's {segments} segments, each a draw of one)"
                      if segments and plan[-1] > segments else "")
            note(f"plan: seeds in rounds until every mean-TTFT claim is conclusive: "
                 f"looks at {', '.join(map(str, plan))} seeds{passes}, at most "
                 f"{(time.monotonic() - started + expected_s(plan, seed_s, overhead_s)) / 60:.1f} min "
                 f"in all (the first {now} seeds' runs took {run_s:.0f} s; budget "
                 f"{budget_s / 60:.0f} min)")
        level = look_level(done, now, plan[-1])
        if on_step:
            on_step(f"look {k}: the claims on {now} seeds", 0.0)
        t = time.monotonic()
        verdicts = primary_verdicts({"claims": lean.claims(packets, now, level)})
        look_s += time.monotonic() - t
        looks.append({"look": k, "seeds": now, "level": level, "claims": verdicts,
                      "wall_s": time.monotonic() - started})
        note(f"look {k} ({now} seeds, level {100 * level:.2f}%): "
             + ", ".join(f"{v['scheduler']} vs {v['baseline']} {v['verdict']}"
                         for v in verdicts))
        done = now
        if verdicts and all(v["verdict"] in CONCLUSIVE for v in verdicts):
            reason = "every mean-TTFT claim conclusive"
            break
        if k >= len(plan):
            reason = "planned rounds done" if plan[-1] < MOST_SEEDS else \
                f"the scenario's bound of {MOST_SEEDS} seeds reached"
            break
        nxt = plan[k]
        cost = ((nxt - now) * (run_s + look_s) / now
                + nxt * judging_s(runs_per_seed, workers, JUDGE_S_PER_RUN))
        if time.monotonic() - started + cost > budget_s:  # the judging not yet paid too
            reason = "the next round would not fit in the budget"
            break
    lean.close()
    record = {"engine": "ns3", "planned_seeds": plan, "budget_s": budget_s,
              "segments": segments, "looks": looks, "level": looks[-1]["level"],
              "rounds_run": len(looks), "reason": reason,
              "wall_s": time.monotonic() - started}
    write_json(folder / "sequential.json", record)
    # the judged scenario (its seeds, each a segment), so that a judge from the folder
    # alone (testbed judge, --flow-model) judges the same seeds
    judged = ns3_scenario.with_overrides({"seeds": done})
    atomic_write(folder / "scenario.yaml", yaml.safe_dump(
        judged.model_dump(mode="json"), sort_keys=False))
    t = time.monotonic()
    doc = judge(judged, folder, packets, calibration, on_step, executor)
    phases.update({"packets_s": run_s, "looks_s": look_s,
                   "judge_s": time.monotonic() - t})
    publish(folder, {**doc, "sequential": record})
