"""One fabric of several side by side (lanes.py starts it in its own network namespace).

Builds the cell's fabric, says {"ready"} (or {"error"}) on the reply pipe, then runs the
tasks read from stdin, one JSON line each ({"id", "scheduler", "seed", "rundir", "tag"}),
in order, answering per task with the file its records and fidelity verdict were written
to, or the error that ended it. Stdin closed (or SIGTERM) tears the fabric down.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from testbed.cells import ConservationError
from testbed.emulation.net import EmulatedNetwork, EmulationError
from testbed.emulation.orchestrator import run_task
from testbed.emulation.processes import WorkerError
from testbed.records import write_json
from testbed.scenario import load_scenario
from testbed.workloads.build import build_workload

RESULT_FILE = "lane-result.json"


def _terminated(*_args) -> None:
    raise SystemExit(143)


def serve(spec: dict) -> int:
    reply = os.fdopen(int(spec["reply_fd"]), "w", buffering=1, encoding="utf-8")

    def say(doc: dict) -> None:
        reply.write(json.dumps(doc) + "\n")

    signal.signal(signal.SIGTERM, _terminated)
    cell_file = Path(spec["cell_file"])
    cell = load_scenario(cell_file)
    try:
        with EmulatedNetwork(cell, cell_file, Path(spec["workdir"]) / "fabric",
                             quiet=not spec.get("verbose"), cores=spec["cores"],
                             daemons=spec.get("daemons")) as net:
            say({"ready": True})
            workloads: dict[int, object] = {}
            for line in sys.stdin:
                task = json.loads(line)
                seed = task["seed"]
                if seed not in workloads:
                    workloads = {seed: build_workload(cell, seed)}  # one seed at a time
                try:
                    records, verdict = run_task(net, cell, task["scheduler"], seed,
                                                Path(task["rundir"]), task["tag"],
                                                workloads[seed])
                except (WorkerError, ConservationError) as exc:
                    say({"id": task["id"], "error": str(exc),
                         "kind": type(exc).__name__})
                    continue
                path = Path(task["rundir"]) / RESULT_FILE
                write_json(path, {"records": records, "verdict": verdict})
                say({"id": task["id"], "path": str(path)})
    except EmulationError as exc:
        say({"error": str(exc)})
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(serve(json.loads(sys.argv[1])))
