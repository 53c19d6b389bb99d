"""`testbed validate --packets both`: three engines, one verdict.

The emulation's validation (the flow model against real Linux TCP) runs first, as
`--packets emulation` runs it. Then ns-3 runs the emulation's own cells and seeds twice,
deciding for itself and forced to the emulation's placements, and ns-3 is judged against
the emulation with the same paired statistics as the flow model is (claims per metric,
whole transfers, TTFT, the ranking per seed): does ns-3 stand in for Linux TCP on this
fabric? The claims' verdicts are taken at the emulation's placements (the network alone,
as the flow model's replay is); ns-3 deciding for itself is judged beside. Then the flow
model is judged against ns-3 (validate_ns3: seeds added on every
core until its claims are conclusive or the budget is spent), in a validation folder of
its own under ns3/. The section `three_way` of the emulation's comparison.json holds
both, and the answer leads with one table of the three engines.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from testbed.inputs import read_json
from testbed.records import PARTIAL, atomic_write, read_csv, write_json
from testbed.validate.comparison.sections import cells_of
from testbed.validate.comparison.verdicts import (
    faithful_cells,
    point_claims,
    seed_rankings,
    ttft_verdicts,
)
from testbed.validate.engines.flow_replay import whole_pairs
from testbed.validate.judging import divergence, model_errors
from testbed.validate.judging.claims import PRIMARY
from testbed.validate.judging.decision import all_of

STAND_IN = "ns3-vs-emulation"  # ns-3's runs of the emulation's own cells and seeds
NS3 = "ns3"  # the flow model's validation against ns-3
RUNS = "runs.json"  # which of STAND_IN's run folders decided and which followed


def mirror(scenario):
    """The emulation's cells as ns-3 runs them: the emulation's twin (its replica in
    modelled time, the kernel's wall-time constants at its dilation), seeds and workload."""
    from testbed.ns3sim.replayer import emulation_twin

    return emulation_twin(scenario)


def packets_folder(folder: Path) -> Path:
    """The emulation's run folder inside a validation folder."""
    found = sorted(folder.glob("*-emulation-*"))
    if not found:
        raise ValueError(f"{folder}: no emulation run folder (a validation on packets)")
    return found[-1]


def run(scenario, folder: Path, executor, on_step: Callable[[str, float], None] | None,
        note: Callable[[str], None], budget_s: float | None, repeats: int = 0) -> None:
    """After the emulation's validation in `folder`: ns-3 on its cells, the flow model's
    validation on ns-3 (with `repeats` perturbed runs of its first seed), and the
    three-way section in comparison.json and the report."""
    from testbed.runner import run_simulated
    from testbed.validate.pipelines.ns3_pipeline import validate_ns3

    started = time.monotonic()
    atomic_write(folder / PARTIAL, "ns-3's part of a three-engine validation not finished\n")
    emu = cells_of(packets_folder(folder))
    seeds = sorted({int(k.rsplit("seed", 1)[1]) for k in emu})  # the emulation's, planned
    twin = mirror(scenario.with_overrides({"seeds": max(seeds)}))  # ones included
    out = folder / STAND_IN
    out.mkdir(exist_ok=True)
    if on_step:
        on_step("ns-3 on the emulation's cells and seeds (deciding, then at its placements)",
                0.0)
    deciding = run_simulated(twin, out, executor=executor, engine="ns3", seeds=seeds).folder
    forced = run_simulated(twin, out, executor=executor, engine="ns3",
                         follow=divergence.recorded(emu), seeds=seeds).folder
    write_json(out / RUNS, {"deciding": deciding.name, "forced": forced.name,
                            "replay": replay_emulation(folder, executor)})
    note(f"ns-3 ran the emulation's {len(emu)} cells and replayed their transfers in "
         f"{time.monotonic() - started:.0f} s; now the flow model against ns-3")
    validate_ns3(scenario, folder / NS3, None, executor, on_step, note, budget_s, repeats,
                 force=True)  # the emulation's part is bought: its rounds keep to the budget
    judge_section_again(folder)
    wall_file = folder / "wall.json"
    wall = read_json(wall_file, object) if wall_file.exists() else {"phases": {}}
    wall["phases"]["ns3_s"] = time.monotonic() - started
    wall["total_s"] = wall.get("total_s", 0.0) + wall["phases"]["ns3_s"]
    write_json(wall_file, wall)
    (folder / PARTIAL).unlink(missing_ok=True)


def replay_emulation(folder: Path, executor) -> str:
    """ns-3 fed the emulation's own transfers (validate/engines/ns3_replay.py), written under
    STAND_IN: the replay's folder name, or why the emulation's run cannot be replayed."""
    from testbed.validate.engines.ns3_replay import Unreplayable, replay_runs

    try:
        _, done = replay_runs([packets_folder(folder)], executor, folder / STAND_IN)
    except Unreplayable as exc:
        return f"refused: {exc}"
    return done.name


def judge_section_again(folder: Path, executor=None) -> dict:
    """comparison.json with its three-way section (anew from the run folders), republished;
    a folder made before ns-3 replayed the emulation's transfers gets the replay now."""
    from testbed.validate.comparison.document import load
    from testbed.validate.pipelines.pipeline import publish

    runs = read_json((folder / STAND_IN / RUNS), object)
    if "replay" not in runs:
        from testbed.sweep import Executor

        runs["replay"] = replay_emulation(folder, executor or Executor.serial())
        write_json(folder / STAND_IN / RUNS, runs)
    doc = load(folder / "comparison.json")
    doc["three_way"] = section(folder)
    return publish(folder, doc)


def ns3_validation(folder: Path) -> Path:
    found = sorted((folder / NS3).glob("*-validate-*"))
    if not found:
        raise ValueError(f"{folder / NS3}: no validation on ns-3 in it")
    return found[-1]


def section(folder: Path) -> dict:
    """ns-3 against the emulation on the emulation's seeds, and the flow model against
    ns-3 as its own validation judged it (pure but for reading the folders)."""
    from testbed.validate.comparison.document import load

    all_emu = cells_of(packets_folder(folder))
    emu_cells, flagged = faithful_cells(all_emu)
    runs = read_json((folder / STAND_IN / RUNS), object)
    deciding = cells_of(folder / STAND_IN / runs["deciding"])
    forced = cells_of(folder / STAND_IN / runs["forced"])
    theirs = ns3_validation(folder)
    ns3 = load(theirs / "comparison.json")
    wall_file = theirs / "wall.json"
    # the verdict at the emulation's placements: the network alone, as the flow model's
    # replay is; deciding for itself adds each engine's own draw of the decisions
    gains = point_claims(emu_cells, forced)
    primary = [c["verdict"] for by in gains.values() for c in by["claims"]
               if c["metric"] == PRIMARY]
    return {
        "engines": {"packets": "emulation", "flow": "ns3"},
        "folders": {"deciding": str(folder / STAND_IN / runs["deciding"]),
                    "forced": str(folder / STAND_IN / runs["forced"]),
                    "ns3_validation": str(theirs)},
        "stand_in": {
            "seeds": sorted({int(k.rsplit("seed", 1)[1]) for k in emu_cells}),
            "excluded_runs": flagged,
            "verdict": all_of(primary),
            "claims": gains,
            "claims_deciding": point_claims(emu_cells, deciding),
            # every run's transfers, as the replay keeps them: what the packets did
            "transfers_forced": model_errors.error_summary(whole_pairs(all_emu, _rows(forced))),
            "transfers_deciding": model_errors.error_summary(whole_pairs(all_emu, _rows(deciding))),
            "ttft_verdicts": ttft_verdicts(emu_cells, forced),
            "seed_rankings": seed_rankings(emu_cells, deciding),
        },
        "replay": _replay_doc(folder / STAND_IN, runs.get("replay")),
        "emulation_seeds": _emulation_seeds(folder, primary_stand_in(gains)),
        "flow_vs_ns3": {"claims": ns3["claims"], "judged": ns3["judged"],
                        "sequential": ns3.get("sequential"),
                        "runs": ns3["targets"]["runs"],
                        "wall": read_json(wall_file, object) if wall_file.exists()
                        else None},
    }


def primary_stand_in(gains: dict) -> list[dict]:
    return [c for by in gains.values() for c in by["claims"] if c["metric"] == PRIMARY]


def _emulation_seeds(folder: Path, claims: list[dict]) -> dict:
    """How the emulation's seeds were chosen (twin_rounds.json, where its seeds were
    planned) and what more would settle ns-3 against it, at its measured wall a seed."""
    from testbed.validate.pipelines.twin_rounds import seed_wall_s, settle_words

    rounds = folder / "twin_rounds.json"
    seeds = len({k.rsplit("seed", 1)[1] for k in cells_of(packets_folder(folder))})
    wall = seed_wall_s(packets_folder(folder))
    return {"planned": read_json(rounds, object) if rounds.exists() else None,
            "seeds": seeds, "seed_wall_s": wall,
            "settle": settle_words(claims, seeds, wall)}


def _replay_doc(out: Path, replay: str | None) -> dict | None:
    """ns-3's replay of the emulation's transfers as judged (packets_replay.judge's
    document), {"refused": why} where it could not be, None before replays existed."""
    if replay is None:
        return None
    if replay.startswith("refused: "):
        return {"refused": replay[len("refused: "):]}
    return read_json((out / replay / "replay.json"), object)


def _rows(cells: dict[str, Path]) -> dict[str, list[dict]]:
    return {key: read_csv(cell / "transfers.csv") for key, cell in cells.items()}
