"""A digest of the flow engine's records on every shipped scenario: every sweep point,
every scheduler, one seed, a window of at most 5 s. A change meant to leave behaviour
alone (a module split, a conversion moved) must leave every digest as it was; a change
meant to alter it rewrites them, and says so in its commit:

    .venv/bin/python -m tests.records_digest --write
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from testbed.cells import tasks_of
from testbed.runner import run_task
from testbed.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
STORED = ROOT / "tests" / "data" / "records-digest.json"
WINDOW_S = 5.0


def short(path: Path):
    wl = load_scenario(path).workload
    return load_scenario(path, {"seeds": 1, "workload.warmup_s": min(wl.warmup_s, 1.0),
                                "workload.measure_s": min(wl.measure_s, WINDOW_S)})


def digest(path: Path) -> str:
    h = hashlib.sha256()
    for task in tasks_of(short(path)):
        r = run_task(task)
        h.update(json.dumps([task.rel, r["requests"], r["transfers"], list(r["links"])],
                            sort_keys=True, default=repr).encode())
    return h.hexdigest()


def digests() -> dict[str, str]:
    return {p.name: digest(p) for p in sorted((ROOT / "scenarios").glob("*.yaml"))}


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    STORED.write_text(json.dumps(digests(), indent=1) + "\n")
    print(f"wrote {STORED}")
