"""Terms of the TCP model judged both ways beside the verdict's model.

Each is fitted on the calibration's probes alone, never on a workload (contention.py),
and every validation runs the model the other way too: with the term where the verdict
leaves it out (link contention, the join stall), without it where the verdict has it.
Both the replay (the network model on the packets' own transfers) and both engines (the
flow model deciding for itself) are judged so, and the held-out selection (selection.py)
says whether each earns its place in the default model (docs/validation.md, "Which
terms are on").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from testbed.runner import run_flowsim
from testbed.validate.replay import replay_cells, whole_pairs
from testbed.validate.summary import with_intervals
from testbed.validate.twin import flow_twin
from testbed.validate.verdicts import seed_rankings, ttft_verdicts


@dataclass(frozen=True)
class Term:
    field: str  # its network.tcp field, and its key in the calibration's "tcp" fit
    model: str  # its flow-model run's name: the verdict's model the other way
    title: str  # what the report and the selection call it
    in_verdict: bool  # in the verdict's model (judged without it) or not (judged with it)

    def other_way(self, fit: dict) -> dict[str, float]:
        """The network.tcp setting of the model judged beside the verdict's."""
        return {self.field: 0.0 if self.in_verdict else fitted(fit, self)}


TERMS = {
    "contention": Term("contention_idle", "tcp_contended", "link contention", False),
    "join_stall": Term("join_stall_s", "tcp_joined", "join stall", False),
}


def fitted(fit: dict, term: Term) -> float:
    """The term's fitted value (0: not fitted, or fitted to nothing)."""
    return float(fit.get(term.field) or 0.0)


def engine_runs(scenario, factors: dict[int, float], fit: dict, folder: Path) -> dict[str, Path]:
    """The flow model the other way for each fitted term, the rest as the verdict's: run
    name -> its folder."""
    return {t.model: run_flowsim(flow_twin(scenario, factors, fit, beside=t.other_way(fit)),
                                 folder).folder
            for t in TERMS.values() if fitted(fit, t)}


def judged(fit: dict, replayer, all_emu: dict, emu_cells: dict, factors: dict,
           flow_cells: dict, loads: dict) -> dict[str, dict | None]:
    """Each fitted term the other way: the replay (on every packet run) and both engines
    (faithful runs; `loads`: each flow run's transfers) with it where the verdict leaves
    it out and without it where the verdict has it, judged as the verdict's model is."""
    out: dict[str, dict | None] = {}
    for key, t in TERMS.items():
        value = fitted(fit, t)
        if not value or t.model not in flow_cells:
            out[key] = None
            continue
        cells = flow_cells[t.model]
        replayed = replay_cells(replayer.with_overrides(
            {f"network.tcp.{f}": v for f, v in t.other_way(fit).items()}), all_emu, factors)
        out[key] = {"title": t.title, "field": t.field, "model": t.model, "value": value,
                    "in_verdict": t.in_verdict,
                    "replay": with_intervals(whole_pairs(all_emu, replayed)),
                    "engines": with_intervals(whole_pairs(emu_cells, loads[t.model])),
                    "ttft_verdicts": ttft_verdicts(emu_cells, cells),
                    "seed_rankings": seed_rankings(emu_cells, cells)}
    return out
