"""The slowest tests of a whole `./run.sh test`, over its phases (parallel unit tests,
the emulation alone, the VMs): conftest.py appends every test phase's duration to the
file named by NETKV_DURATIONS, one JSON line each; this prints the N slowest.

    python -m tests.slowest FILE [N]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def slowest(path: Path, n: int = 30) -> list[str]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows.sort(key=lambda r: -r["seconds"])
    total = sum(r["seconds"] for r in rows)
    out = [f"{'=' * 20} slowest {min(n, len(rows))} of {len(rows)} test phases "
           f"({total / 60:.1f} test-minutes) {'=' * 20}"]
    out += [f"{r['seconds']:8.2f}s {r['when']:8} {r['test']}" for r in rows[:n]]
    return out


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print("\n".join(slowest(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 30)))
