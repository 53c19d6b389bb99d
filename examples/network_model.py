"""A network model of your own, judged against packets beside max-min, end to end.

    PYTHONPATH=examples .venv/bin/python examples/network_model.py [VALIDATION_FOLDER]

`network_model:PerStream` below gives every transfer its tier's bandwidth split among the
shard streams on its busiest link at its start, plus one round trip: a few lines of the
kind a serving simulator carries. With a finished validation folder it is judged against
that folder's packets (`testbed judge FOLDER --flow-model network_model:PerStream` does the
same); without one, scenarios/validate.yaml is first validated on ns-3 (no root; 2 seeds).
docs/schedulers.md#network-models has the interface.
"""

import sys
from pathlib import Path

from testbed import NetworkModel


class PerStream(NetworkModel):
    """The tier's bandwidth shared per stream on the busiest link, plus one round trip."""

    name = "per-stream"

    def transfer_time(self, transfer, sharing):
        busiest = max((sum(1 for f in sharing if link in f.links)
                       for path in transfer.paths for link in path), default=0)
        share = transfer.bandwidth * transfer.shards / (transfer.shards + busiest)
        return transfer.rtt_s + transfer.bytes / share


if __name__ == "__main__":
    from testbed import load_scenario, validate
    from testbed.results import ValidationResult
    from testbed.validate.pipelines.judge_folder import with_flow_models

    if len(sys.argv) > 1:
        folder = Path(sys.argv[1])
    else:
        scenario = load_scenario("scenarios/validate.yaml", {"seeds": 2})
        folder = validate(scenario, out="results", packets="ns3", progress=True).folder
    with_flow_models(folder, ["network_model:PerStream", "fixed-bandwidth"])
    print("\n".join(ValidationResult(folder).answer_lines()))
