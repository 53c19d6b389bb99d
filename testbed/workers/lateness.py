"""How late a worker process woke for its timers: the application's own fidelity figure.

The flow model runs every control step (an arrival, a prefill's end, a decode iteration,
a decision) at its instant; an emulated worker runs it when its thread gets the CPU (and
Python's lock). So each process records, for every timer it runs after the run started,
wall time at the call minus the wall time it was due (cyclictest's measure), and a probe
timer every PROBE_S keeps the sample steady where a process has few timers of its own.
Each process writes its figures to OUT/lateness/<process>.json as it exits; the fidelity
verdict reads them back.

A timer is a short wake-up, which the kernel's scheduler favours; a KV push is minutes of
CPU in sum, which it shares. So each push also measures how long its thread sat runnable
without a core (`run_queue_wait`): time its bytes were held back by the machine, not by
the network.
"""

from __future__ import annotations

import contextlib
import heapq
import json
from array import array
from pathlib import Path

from testbed.clock import Dilation

FOLDER = "lateness"
PROBE_S = 0.02  # wall seconds between probe timers: 50 wake-ups a second per process
MOST_LATE_KEPT = 32  # the most late wake-ups kept with when they were due: a stall of the
# whole machine is every process late at the same time, which only their times can tell


class Lateness:
    """Wake-up lateness samples of one process, in wall seconds."""

    def __init__(self) -> None:
        self.samples = array("d")
        self.since: float | None = None  # wall epoch from which timers count (run start)
        self.most_late: list[tuple[float, float, float]] = []  # heap: (late, due, woke)

    def record(self, due_wall: float, woke_wall: float) -> None:
        if self.since is not None and due_wall >= self.since:
            late = max(0.0, woke_wall - due_wall)
            self.samples.append(late)
            if len(self.most_late) < MOST_LATE_KEPT:
                heapq.heappush(self.most_late, (late, due_wall, woke_wall))
            elif late > self.most_late[0][0]:
                heapq.heapreplace(self.most_late, (late, due_wall, woke_wall))

    def summary(self, dilation: float) -> dict:
        """Count and quantiles, in wall and in modelled milliseconds; `late_spans`: the
        most late wake-ups, [due, woke] in wall epoch seconds, most late first."""
        xs = sorted(self.samples)
        out: dict = {"count": len(xs), "dilation": dilation}
        for name, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
            wall = xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3 if xs else None
            out[f"{name}_wall_ms"] = wall
            out[f"{name}_ms"] = None if wall is None else Dilation(dilation).modelled(wall)
        out["late_spans"] = [[due, woke] for _, due, woke in sorted(self.most_late, reverse=True)]
        return out

    def write(self, folder: str | Path, process: str, dilation: float) -> None:
        """Best effort: a full disk or a missing folder leaves the verdict without it."""
        with contextlib.suppress(OSError):
            path = Path(folder) / FOLDER
            path.mkdir(exist_ok=True)
            (path / f"{process}.json").write_text(json.dumps(self.summary(dilation)))


def run_queue_wait() -> float | None:
    """Seconds the calling thread has spent runnable but waiting for a core (the second
    field of /proc/thread-self/schedstat); None where the kernel keeps no such file."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def push_waits(transfers: list[dict]) -> dict | None:
    """Of a run's transfer rows (one per shard, modelled seconds): how many carried their
    sender's run-queue wait, and the share of their sending time it took, over all of
    them and at the 99th percentile of shards; None where none carried it."""
    rows = [(float(t["cpu_wait_s"]), float(t["end"]) - float(t["start"])) for t in transfers
            if t.get("cpu_wait_s") not in (None, "") and float(t["end"]) > float(t["start"])]
    if not rows:
        return None
    shares = sorted(min(1.0, w / d) for w, d in rows)
    return {"count": len(rows),
            "share": sum(w for w, _ in rows) / sum(d for _, d in rows),
            "p99_share": shares[min(len(shares) - 1, int(0.99 * len(shares)))],
            "wait_s": sum(w for w, _ in rows)}


def clear(folder: str | Path) -> None:
    """Before a run: a folder run again must not carry the last run's figures."""
    for path in (Path(folder) / FOLDER).glob("*.json"):
        path.unlink(missing_ok=True)


def read(folder: str | Path) -> dict[str, dict]:
    """process -> its summary, for every process that wrote one in `folder`."""
    out = {}
    for path in sorted((Path(folder) / FOLDER).glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            out[path.stem] = json.loads(path.read_text())
    return out
