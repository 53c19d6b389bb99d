"""`testbed validate --packets ns3`: the flow model judged against ns-3's packets.

The same judgement as against the emulation (pipeline.judge: the flow model's runs,
replays, per-transfer errors, TTFT verdicts, the paper's claims, the report), with ns-3
in the emulation's place: calibrated on ns-3's own probes (calibrate's plan, the same
fits), every cell a process of its own on every core or on a Dask cluster. Its replica
has no time dilation (a simulator does not run short of CPU), so the flow model's matched
scenario is the replica at ns-3's scale and dilation 1. No root. What it will cost is
said (and refused past the budget) before it starts: engines/ns3_cost.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import yaml

from testbed.records import PARTIAL, atomic_write, kept_if_recorded, stamp, write_json
from testbed.validate.engines.ns3_cost import (
    check_fits,
    first_round,
    local_workers,
    record_rate,
    wire_mss,
)


def for_ns3(scenario):
    """The scenario as ns-3 runs it: the replica at ns-3's scale, no time dilation (what
    the flow model's twin and a calibration are keyed on)."""
    return scenario.with_overrides({"emulation.scale": scenario.ns3.scale or
                                    scenario.emulation.scale,
                                    "emulation.time_dilation": 1.0})


FIRST_ROUND_SEEDS = 8  # the pilot: enough seeds for a first interval, about half a minute
DEFAULT_BUDGET_S = 1800.0  # how long a validation on ns-3 may add seeds, by default


def _check_cost(ns3_scenario, rounds: bool, segments: int | None, executor,
                budget_s: float | None, force: bool, note: Callable[[str], None]) -> None:
    """The first round's (or the asked seeds') estimate said, and refused past the budget."""
    from testbed.validate.pipelines.ns3_rounds import FIRST_SEEDS

    if executor is not None and executor.kind == "dask":
        return  # a cluster's processes are not known here: its rounds keep to the budget
    seeds = min(FIRST_SEEDS, segments or FIRST_SEEDS) if rounds else ns3_scenario.seeds
    workers = local_workers(executor)
    budget = DEFAULT_BUDGET_S if budget_s is None else budget_s
    if force:
        note(f"ns-3's {'first round' if rounds else 'runs'}: "
             f"{first_round(ns3_scenario, seeds, workers).line()}")
        return
    plan = check_fits(ns3_scenario, seeds, workers, budget)
    note(f"ns-3's {'first round' if rounds else 'runs'}: {plan.line()}")


def validate_ns3(scenario, out_root: Path, calibration: dict | None = None,
                 executor=None, on_step: Callable[[str, float], None] | None = None,
                 on_note: Callable[[str], None] | None = None,
                 budget_s: float | None = None, repeats: int = 0, force: bool = False) -> Path:
    """The scenario's seeds on ns-3, judged once; or, when it asks for one seed (none
    given), seeds added in rounds until every primary claim is conclusive or the budget
    (default 30 min) is spent (ns3_rounds.py). Either way each seed is its own segment of
    a trace, and past its segments a draw of one (ns3_rounds.cycled). `repeats`: the first
    seed run again that many times, perturbed (repeat.jittered): the floor of the
    per-transfer error, read against the replay's. A first round (or the seeds asked for)
    estimated past the budget is refused before anything starts (engines/ns3_cost.py),
    unless `force`."""
    from testbed.ns3sim.ns3_fabric import wire_payload_share
    from testbed.ns3sim.program import checked_program
    from testbed.runner import run_simulated
    from testbed.validate.engines import repeat
    from testbed.validate.engines.fabric_probes import calibration_document
    from testbed.validate.engines.ns3_probes import probe_tiers
    from testbed.validate.pipelines.ns3_rounds import check_segments, cycled
    from testbed.validate.pipelines.pipeline import check_calibration

    note = on_note or (lambda _line: None)
    started = time.monotonic()
    ns3_scenario, segments = cycled(for_ns3(scenario))
    if ns3_scenario.seeds == 1 or budget_s is not None:  # rounds of seeds: refused before a folder
        check_segments(ns3_scenario, segments)
    if calibration is not None:
        check_calibration(calibration, ns3_scenario)
    exe = checked_program(on_build=note)
    rounds = ns3_scenario.seeds == 1 or budget_s is not None
    _check_cost(ns3_scenario, rounds, segments, executor, budget_s, force, note)
    folder = out_root / f"{scenario.name}-validate-{stamp()}"
    folder.mkdir(parents=True)
    with kept_if_recorded(folder):
        atomic_write(folder / PARTIAL, "validation started; not finished\n")
        atomic_write(folder / "scenario.yaml",
                     yaml.safe_dump(ns3_scenario.model_dump(mode="json"), sort_keys=False))
        phases: dict[str, float] = {}
        if calibration is None:
            t = time.monotonic()
            calibration = calibration_document(ns3_scenario, probe_tiers(
                ns3_scenario, exe, lambda label: on_step and on_step(label, 0.0)),
                wire_payload_share(ns3_scenario))
            phases["calibration_s"] = time.monotonic() - t
            note(f"calibrated on ns-3's probes in {phases['calibration_s']:.1f} s")
        write_json(folder / "calibration.json", calibration)
        for i in range(repeats):
            note(f"ns-3 again, perturbed ({i + 1} of {repeats})")
            t = time.monotonic()
            first = repeat.NS3_REPEAT_SEEDS if ns3_scenario.seeds == 1 else \
                min(ns3_scenario.seeds, repeat.NS3_REPEAT_SEEDS)  # one seed asked: the rounds' first
            run_simulated(repeat.jittered(ns3_scenario, i + 1, first), folder / repeat.REPEATS,
                        lambda label: on_step and on_step(label, 0.0), executor=executor,
                        engine="ns3")
            phases["repeats_s"] = phases.get("repeats_s", 0.0) + time.monotonic() - t
        if rounds:
            from testbed.validate.pipelines.ns3_rounds import run_rounds

            run_rounds(ns3_scenario, folder, calibration, executor, on_step, note,
                       DEFAULT_BUDGET_S if budget_s is None else budget_s, phases, started)
        else:
            _judge_once(ns3_scenario, folder, calibration, executor, on_step, note, phases)
        write_json(folder / "wall.json", {"total_s": time.monotonic() - started, "phases": phases})
        for run in folder.glob(f"{ns3_scenario.name}-ns3-*"):
            record_rate(run, ns3_scenario.emulation.scale, wire_mss(ns3_scenario))
        (folder / PARTIAL).unlink(missing_ok=True)
    return folder


def _judge_once(ns3_scenario, folder: Path, calibration: dict, executor, on_step, note,
                phases: dict) -> None:
    from testbed.runner import run_simulated
    from testbed.validate.pipelines.pipeline import judge

    t = time.monotonic()
    packets = run_simulated(ns3_scenario, folder, lambda label: on_step and on_step(label, 0.0),
                          executor=executor, engine="ns3")
    phases["packets_s"] = time.monotonic() - t
    note(f"{len(list(packets.folder.glob('cells/*/*/seed*')))} ns-3 runs in "
         f"{phases['packets_s']:.1f} s")
    t = time.monotonic()
    judge(ns3_scenario, folder, packets.folder, calibration, on_step, executor)
    phases["judge_s"] = time.monotonic() - t
