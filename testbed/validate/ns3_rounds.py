"""Seeds on ns-3 until the paper's claims are conclusive: the sequential validation there.

A seed of ns-3 costs seconds and repeats exactly, so evidence is bought in seeds, each its
own segment of a trace (`workload.seed_segments`: seeds of one trace segment share its
arrivals and lengths and would be no new evidence). Rounds double the seeds (8, 16, 32,
...), each judged in full (pipeline.judge: the verdicts' intervals with the draws), and
the run stops after the first look at which every primary (mean-TTFT) claim agrees or
disagrees. The first round's runs are the pilot: their time per seed fixes the plan, the
largest doubling whose runs and judging fit the budget, printed before any look. The
looks spend alpha = 5% with the emulation's O'Brien-Fleming-type function
(sequential.py), the information fraction being the seeds so far over the planned seeds:
look k's intervals are at level 1 - (alpha(t_k) - alpha(t_k-1)), so by the union bound
the chance that any look's interval misses is at most 5%.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from testbed.records import atomic_write, write_json
from testbed.validate.answer import primary_claims, verdict_interval
from testbed.validate.decision import Verdict
from testbed.validate.sequential import obrien_fleming_spent

FIRST_SEEDS = 8
MOST_SEEDS = 1000  # the scenario's own bound on seeds
JUDGE_PER_RUN = 1.0  # judging a seed, in the pilot's seconds to run one: 0.7 on the demo
CONCLUSIVE = (Verdict.AGREE, Verdict.DISAGREE)


def planned_seeds(first: int, run_s: float, budget_s: float, spent_s: float,
                  most: int = MOST_SEEDS) -> list[int]:
    """Seeds judged at each planned look: doubling from `first` while the new seeds' runs
    and the judging of all seeds so far (JUDGE_PER_RUN times a run, per seed) fit in what
    the budget leaves after `spent_s`."""
    looks, total = [min(first, most)], spent_s + min(first, most) * run_s * (1 + JUDGE_PER_RUN)
    while looks[-1] < most:
        nxt = min(2 * looks[-1], most)
        more = (nxt - looks[-1]) * run_s + nxt * run_s * JUDGE_PER_RUN
        if total + more > budget_s:
            break
        total += more
        looks.append(nxt)
    return looks


def expected_s(looks: list[int], run_s: float) -> float:
    """The plan's time if every look is taken: runs of every seed, judging at each look."""
    return looks[-1] * run_s + sum(looks) * run_s * JUDGE_PER_RUN


def look_level(before: int, now: int, planned: int) -> float:
    """The confidence level of a look at `now` seeds after one at `before`."""
    return 1.0 - (obrien_fleming_spent(now / planned) - obrien_fleming_spent(before / planned))


def primary_verdicts(doc: dict) -> list[dict]:
    """The mean-TTFT claims of a judging, each its name, verdict and the interval the
    verdict read."""
    return [{"scheduler": c["scheduler"], "baseline": c["baseline"], "verdict": c["verdict"],
             "difference": verdict_interval(c)} for _, c in primary_claims(doc)]


def _add_seeds(replica, folder: Path, packets: Path | None, done: int, now: int, executor,
               on_step) -> Path:
    """Seeds done+1..now on ns-3, into the packets' one run folder."""
    from testbed.runner import run_flowsim

    batch = replica.with_overrides({"seeds": now - done})
    if done:  # the next seeds keep their own trace segments: seed k is segment k - seed
        batch = batch.with_overrides({"seed": replica.seed + done,
                                      "workload.trace_offset_s": _offset(replica, done)})
    run = run_flowsim(batch, folder / ("more" if packets else ""),
                      lambda label: on_step and on_step(label, 0.0), executor=executor,
                      engine="ns3").folder
    if packets is None:
        return run
    for seed_dir in sorted(run.glob("cells/*/*/seed*")):
        dest = packets / seed_dir.relative_to(run)
        dest.parent.mkdir(parents=True, exist_ok=True)
        seed_dir.rename(dest)
    shutil.rmtree(folder / "more")
    return packets


def _offset(replica, done: int) -> float:
    """Where seed replica.seed + done starts in the trace, as one run of all seeds would
    place it."""
    from testbed.workloads.build import seed_offset

    return seed_offset(replica, replica.seed + done)


def run_rounds(replica, folder: Path, calibration: dict, executor,
               on_step: Callable[[str, float], None] | None, note: Callable[[str], None],
               budget_s: float, phases: dict, started: float) -> None:
    """Rounds of seeds until the primary claims are conclusive, the planned looks are
    done or the next round would not fit; sequential.json records the plan and the looks."""
    from testbed.validate.pipeline import judge, publish
    from testbed.workloads.build import segments_available

    if replica.workload.synthetic is None:
        replica = replica.with_overrides({"workload.seed_segments": True})
    most = min(MOST_SEEDS, segments_available(replica) or MOST_SEEDS)
    if most < 2:
        raise ValueError(f"{replica.workload.trace}: the trace holds {most} segment(s) of "
                         "this window; seeds on ns-3 need one each: shorten "
                         "workload.warmup_s + measure_s, lower the load, set "
                         "workload.trace_loop (replays are not new evidence), or give --seeds")
    looks: list[dict] = []
    packets, done, plan, reason = None, 0, [min(FIRST_SEEDS, most)], "planned rounds done"
    run_s = judge_s = 0.0
    for k in range(1, 64):
        now = plan[k - 1]
        t = time.monotonic()
        packets = _add_seeds(replica, folder, packets, done, now, executor, on_step)
        run_s += time.monotonic() - t
        if k == 1:
            plan = planned_seeds(now, run_s / now, budget_s, time.monotonic() - started,
                                 most)
            note(f"plan: seeds in doubling rounds until every mean-TTFT claim is conclusive: "
                 f"looks at {', '.join(map(str, plan))} seeds, at most "
                 f"{(time.monotonic() - started + expected_s(plan, run_s / now)) / 60:.1f} min "
                 f"in all (the first {now} seeds' runs took {run_s:.0f} s; budget "
                 f"{budget_s / 60:.0f} min)")
        level = look_level(done, now, plan[-1])
        record = {"engine": "ns3", "planned_seeds": plan, "budget_s": budget_s,
                  "segments": most,
                  "looks": looks, "level": level, "rounds_run": k, "reason": reason}
        write_json(folder / "sequential.json", record)
        t = time.monotonic()
        doc = judge(replica.with_overrides({"seeds": now}), folder, packets, calibration,
                    on_step, executor)
        judge_s += time.monotonic() - t
        verdicts = primary_verdicts(doc)
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
            reason = ("planned rounds done" if plan[-1] < most else
                      f"every segment of the trace judged ({most} seeds)")
            break
        nxt = plan[k]
        cost = (nxt - now) * run_s / now + nxt * judge_s / sum(look["seeds"] for look in looks)
        if time.monotonic() - started + cost > budget_s:
            reason = "the next round would not fit in the budget"
            break
    phases.update({"packets_s": run_s, "judge_s": judge_s})
    record.update({"looks": looks, "reason": reason, "rounds_run": len(looks),
                   "wall_s": time.monotonic() - started})
    write_json(folder / "sequential.json", record)
    # the judged scenario (its seeds, each a segment), so that a judge from the folder
    # alone (testbed judge, --flow-model) judges the same seeds
    atomic_write(folder / "scenario.yaml", yaml.safe_dump(
        replica.with_overrides({"seeds": done}).model_dump(mode="json"), sort_keys=False))
    publish(folder, {**doc, "sequential": record})
