"""A sequential validation's plan and looks (the I/O around validate/judging/sequential.py).

Before the fabric starts: a flow-model pilot of the scenario gives the primary claims'
standard error and each scheduler's drain, this machine's measured phase times give a
round's wall time, and the plan (rounds x measurement window) is printed with its
expected duration. While the packets run: after each round (every scheduler on one more
seed) the claims are judged on what is in at that look's level, and the run goes on
only while a primary claim is unresolved, the target width not reached and the budget
not spent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from testbed.cells import Task, slug
from testbed.inputs import read_json
from testbed.model.extensions.plugins import display_name
from testbed.records import read_csv
from testbed.runner import run_task
from testbed.validate.engines.flow_match import flow_scenario
from testbed.validate.engines.machine_cache import load_timings
from testbed.validate.judging import claims, sequential, stats, trajectory
from testbed.workloads.build import build_workload

MIN_WINDOW_S = 10.0  # modelled measurement per round: below it warm-up and drain dominate
MAX_WINDOW_S = 120.0
MAX_ROUNDS = 8


def _pilot_run(scenario, window_s: float) -> tuple[dict, dict[str, float]]:
    """The flow model (TCP terms, uncalibrated) on the scenario's first seed at one
    window: its requests per scheduler, and each scheduler's drain (modelled seconds from
    the window's end to the last request done)."""
    matched = flow_scenario(scenario.with_overrides({"workload.measure_s": window_s}), None, {})
    point, point_scenario = matched.points()[0]
    runs, drain = {}, {}
    end = point_scenario.workload.warmup_s + point_scenario.workload.measure_s
    for sched in point_scenario.schedulers:
        rows = run_task(Task(0, point, point_scenario, sched, point_scenario.seed))["requests"]
        for engine in claims.ENGINES:  # the flow model stands in for both engines
            runs[(engine, sched, point_scenario.seed)] = rows
        done = [float(r["done"]) for r in rows if r.get("done") is not None]
        drain[sched] = max(0.0, max(done, default=end) - end)
    return runs, drain


def _pilot(scenario) -> tuple[float, float, Callable[[str, float], float]]:
    """(largest bootstrap SE of a primary claim's flow-model gain at the scenario's window,
    largest sd of one run's primary gain across draws (trajectory.py), drain(scheduler,
    window)): the drain at two windows, the scenario's and a long one, interpolated (a
    backlog that grows with the window grows its drain)."""
    short = scenario.workload.measure_s
    long = max(short, min(MAX_WINDOW_S, 5 * short))
    runs, d_short = _pilot_run(scenario, short)
    d_long = _pilot_run(scenario, long)[1] if long > short else d_short
    judged = claims.judge_point(claims.pair_requests(runs), resamples=500)
    ses = [c.flow.se for c in claims.primary(judged.claims) if c.flow.se == c.flow.se]
    point_scenario = flow_scenario(scenario, None, {}).points()[0][1]
    sds = [d.sd for d in trajectory.draw_spreads(trajectory.pooled(
        {point_scenario.seed: trajectory.seed_draws(point_scenario, point_scenario.seed)})).values()]

    def drain(sched: str, window: float) -> float:
        if long <= short:
            return d_short[sched]
        slope = (d_long[sched] - d_short[sched]) / (long - short)
        return max(0.0, d_short[sched] + slope * (window - short))

    return (max(ses) if ses else math.nan), max(sds, default=0.0), drain


def make_plan(scenario, target_half_width: float, budget_s: float,
              calibrated: bool, lanes: int = 1) -> tuple[sequential.Plan, dict]:
    """The plan, and what it rests on (pilot SE, drains, timings and their source);
    `lanes` fabrics side by side run that many seeds per round."""
    se, draw_sd, drain = _pilot(scenario)
    timings, source = load_timings()
    emu, wl = scenario.emulation, scenario.workload
    n_points = len(scenario.points())

    def round_wall(window: float) -> float:
        return n_points * sum(
            timings["worker_start_s"] + timings["worker_stop_s"]
            + emu.dilation.wall(wl.warmup_s + window
                                + timings["drain_factor"] * drain(s, window))
            for s in scenario.schedulers)

    setup = (n_points * (timings["fabric_s"] + (0.0 if calibrated else timings["calibration_s"]))
             + timings["judge_s"])
    segments = _max_rounds(scenario)  # seeds the trace has segments for
    lanes = max(1, min(lanes, segments))
    max_rounds = max(1, segments // lanes)
    p = sequential.plan(wl.measure_s, se, target_half_width, budget_s, round_wall, setup,
                        MIN_WINDOW_S, MAX_WINDOW_S, max_rounds, lanes, draw_sd)
    return p, {"pilot_se": se, "pilot_draw_sd": draw_sd, "pilot_window_s": wl.measure_s,
               "drain_s": {s: drain(s, p.window_s) for s in scenario.schedulers},
               "timings": timings, "timings_source": source, "max_rounds": max_rounds}


def _max_rounds(scenario) -> int:
    """Rounds whose trace segments all exist (at the largest window)."""
    probe = planned_scenario(scenario, MAX_ROUNDS, MAX_WINDOW_S)
    for rounds in range(MAX_ROUNDS, 1, -1):
        try:
            build_workload(probe.points()[0][1], probe.seed + rounds - 1)
            return rounds
        except ValueError:
            continue
    return 1


def planned_scenario(scenario, rounds: int, window_s: float):
    """The scenario as the plan runs it: `rounds` seeds of `window_s` measurement, each
    seed its own trace segment."""
    over = {"seeds": rounds, "workload.measure_s": float(window_s)}
    if scenario.workload.synthetic is None:
        over["workload.seed_segments"] = True
    return scenario.with_overrides(over)


def describe_plan(p: sequential.Plan, basis: dict) -> str:
    return (f"plan: up to {p.rounds} round(s)"
            + (f" of {p.lanes} seeds side by side" if p.lanes > 1 else "")
            + f" x {p.window_s:.0f} s measurement per "
            f"scheduler ({p.limited_by}: the target half-width "
            f"{100 * p.target_half_width:.1f} points {sequential.need_words(p.as_dict())}; pilot SE "
            f"{100 * basis['pilot_se']:.1f} points at {basis['pilot_window_s']:g} s); "
            f"expected {p.expected_wall_s / 60:.1f} min wall, at most {p.budget_s / 60:.1f} "
            f"min (phase times: {basis['timings_source']})")


@dataclass
class Looks:
    """after_round for run_emulation: judge what is in after each round and decide."""

    scenario: object  # the planned scenario
    plan: sequential.Plan
    started: float  # time.monotonic() when the validation began
    judge_s: float  # expected wall time of judging the packets at the end
    flow_scenario: object | None = None  # the verdict's flow model (set once calibrated)
    on_look: object | None = None  # callable(str): a line per look
    runs: dict = field(default_factory=dict)  # point -> {(engine, sched, seed): rows}
    looks: list = field(default_factory=list)
    reason: str = ""
    unfaithful: list = field(default_factory=list)
    seeds: dict = field(default_factory=dict)  # point -> seeds run
    draws: dict = field(default_factory=dict)  # point -> {seed: trajectory.seed_draws}

    def __call__(self, index: int, seeds: list[int], root: Path) -> bool:
        point, point_scenario = self.scenario.points()[index]
        key = f"{index:03d}-{slug(point)}"
        base = root / "cells" / key
        mine = self.runs.setdefault(key, {})
        faithful = True
        for seed in seeds:  # one per fabric side by side
            ok = all(read_json((base / s / f"seed{seed}" / "summary.json"), object)
                     .get("fidelity") == "faithful" for s in point_scenario.schedulers)
            self.seeds.setdefault(key, []).append(seed)
            if ok:
                flow_cell = self.flow_scenario.points()[index][1]
                for s in point_scenario.schedulers:
                    mine[("packets", s, seed)] = read_csv(base / s / f"seed{seed}"
                                                          / "requests.csv")
                    mine[("flow", s, seed)] = run_task(Task(index, point, flow_cell, s, seed))[
                        "requests"]
                self.draws.setdefault(key, {})[seed] = trajectory.seed_draws(flow_cell, seed)
            else:
                self.unfaithful.append(f"{key} seed {seed}")
                faithful = False
        seed = ", ".join(map(str, seeds))
        look = 1 + sum(x["point"] == key for x in self.looks)  # each point has its looks
        level = sequential.look_level(min(look, self.plan.rounds), self.plan.rounds)
        judged = claims.judge_point(
            claims.pair_requests(mine), level, normal=True,
            spreads=trajectory.draw_spreads(trajectory.pooled(self.draws.get(key, {})))) \
            if mine else claims.PointClaims()
        primary = claims.primary(judged.claims)
        self.looks.append({"look": look, "point": key, "seed": seed, "n": judged.n,
                           "level": level, "faithful": faithful,
                           "claims": [c.as_dict() for c in primary]})
        elapsed = time.monotonic() - self.started
        conclusive = bool(primary) and all(c.verdict != "inconclusive" for c in primary)
        narrow = bool(primary) and all((c.draws or c.difference).half_width
                                       <= self.plan.target_half_width for c in primary)
        # judging the packets at the end must still fit in the budget
        reason = sequential.stop_reason(conclusive, narrow, look, self.plan.rounds, elapsed,
                                        self.plan.round_wall_s,
                                        self.plan.budget_s - self.judge_s)
        if self.on_look:
            verdicts = ", ".join(f"{display_name(c.scheduler)} vs {display_name(c.baseline)} "
                                 f"{c.verdict}" for c in primary) or "nothing judged yet"
            self.on_look(f"look {look} (seed {seed}, {judged.n} paired requests, level "
                         f"{100 * level:.2f}%): {verdicts}"
                         + ("" if faithful else " [this round was not faithful: left out]")
                         + (f"; stopping: {reason}" if reason else ""))
        if reason:
            self.reason = reason
        return reason is None

    def rounds_run(self) -> int:
        return max((x["look"] for x in self.looks), default=0)

    def seeds_run(self) -> int:
        """Seeds every point ran (rounds x fabrics side by side), the judged scenario's."""
        return max((len(v) for v in self.seeds.values()), default=0)

    def final_level(self) -> float:
        """The level the final claims are stated at: each point's last look's, the widest
        of them when points stopped at different looks."""
        last = {x["point"]: x["level"] for x in self.looks}
        return max(last.values(), default=stats.CONFIDENCE)

    def record(self, wall_s: float) -> dict:
        """What sequential.json holds; wall_s and predicted_wall_s run up to the judging
        of the packets (the report is written by it). round_wall_s covers every point."""
        rounds = self.rounds_run()
        return {"plan": self.plan.as_dict(), "looks": self.looks,
                "reason": self.reason or "planned rounds done",
                "level": self.final_level(),
                "rounds_run": rounds, "unfaithful_rounds": self.unfaithful,
                "wall_s": wall_s,
                "predicted_wall_s": (self.plan.setup_wall_s - self.judge_s
                                     + rounds * self.plan.round_wall_s),
                "predicted_judge_s": self.judge_s}
