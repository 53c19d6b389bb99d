"""Terms of the TCP model judged both ways beside the verdict's model.

Each is fitted on the calibration's probes alone, never on a workload (contention.py),
and every validation runs it both ways: the replay (the network model on the packets'
own transfers) and both engines (the flow model deciding for itself). A term the verdict
leaves out is run with it on; a term in the verdict's model (the shard spread) is run
with it off. The held-out selection (selection.py) then says whether each earns its
place in the default model (docs/validation.md, "Which terms are on").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from testbed.runner import run_simulated
from testbed.validate.comparison.summary import with_intervals
from testbed.validate.comparison.verdicts import seed_rankings, ttft_verdicts
from testbed.validate.engines.flow_match import flow_scenario
from testbed.validate.engines.flow_replay import replay_cells, whole_pairs


@dataclass(frozen=True)
class Term:
    field: str  # its network.tcp field, and its key in the calibration's "tcp" fit
    model: str  # its flow-model run's name, and the selection's model with it on
    title: str  # what the report and the selection call it
    in_verdict: bool = False  # in the verdict's model: judged by a run without it


TERMS = {
    "contention": Term("contention_idle", "tcp_contended", "link contention"),
    "join_stall": Term("join_stall_s", "tcp_joined", "join stall"),
    "spread": Term("shard_spread", "tcp_unspread", "shard spread", in_verdict=True),
}


def fitted(fit: dict, term: Term) -> float:
    """The term's fitted value (0: not fitted, or fitted to nothing)."""
    return float(fit.get(term.field) or 0.0)


def other_way(scenario, factors: dict[int, float], fit: dict, term: Term):
    """The verdict's model with `term` the other way: on if the verdict leaves it out,
    off if the verdict has it."""
    if term.in_verdict:
        return flow_scenario(scenario, factors, {**fit, term.field: 0.0})
    return flow_scenario(scenario, factors, fit, beside=(term.field,))


def engine_runs(scenario, factors: dict[int, float], fit: dict, folder: Path,
                executor=None) -> dict[str, Path]:
    """The flow model with each fitted term the other way, the rest as the verdict's: run
    name -> its folder."""
    return {t.model: run_simulated(other_way(scenario, factors, fit, t), folder,
                                 executor=executor).folder
            for t in TERMS.values() if fitted(fit, t)}


def judged(fit: dict, replayer, all_emu: dict, emu_cells: dict, factors: dict,
           flow_cells: dict, loads: dict) -> dict[str, dict | None]:
    """Each fitted term the other way: the replay so (on every packet run) and both
    engines so (faithful runs; `loads`: each flow run's transfers), as the verdict's
    model is judged."""
    out: dict[str, dict | None] = {}
    for key, t in TERMS.items():
        value = fitted(fit, t)
        if not value or t.model not in flow_cells:
            out[key] = None
            continue
        cells = flow_cells[t.model]
        replayed = replay_cells(replayer.with_overrides(
            {f"network.tcp.{t.field}": 0.0 if t.in_verdict else value}), all_emu, factors)
        out[key] = {"title": t.title, "field": t.field, "model": t.model, "value": value,
                    "in_verdict": t.in_verdict,
                    "replay": with_intervals(whole_pairs(all_emu, replayed)),
                    "engines": with_intervals(whole_pairs(emu_cells, loads[t.model])),
                    "ttft_verdicts": ttft_verdicts(emu_cells, cells),
                    "seed_rankings": seed_rankings(emu_cells, cells)}
    return out
