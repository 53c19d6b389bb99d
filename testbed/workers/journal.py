"""What a run has finished, on disk as it finishes.

The router writes its records once, when the run ends (router.json). A router that dies
(SIGKILL, a crash, the machine out of memory) would take every finished request with it,
so each request that ends and each transfer that lands is also appended here, one JSON
line each, flushed at once. The orchestrator reads it back only when router.json is
missing.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

NAME = "journal.jsonl"


class Journal:
    def __init__(self, folder: Path):
        self.path = Path(folder) / NAME
        self._file = self.path.open("a", encoding="utf-8", buffering=1)  # line-buffered

    def request(self, row: dict) -> None:
        self._write("request", row)

    def transfer(self, row: dict) -> None:
        self._write("transfer", row)

    def _write(self, kind: str, row: dict) -> None:
        # a full disk must not stop the run; router.json says the rest
        with contextlib.suppress(OSError):
            self._file.write(json.dumps({"kind": kind, **row}, default=str) + "\n")

    def close(self) -> None:
        self._file.close()


def read(folder: Path) -> tuple[list[dict], list[dict]] | None:
    """(requests, transfers) journaled in `folder`, the last line cut short by a kill
    left out; None without a journal."""
    path = Path(folder) / NAME
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    out: dict[str, list[dict]] = {"request": [], "transfer": []}
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        kind = row.pop("kind", None)
        if kind in out:
            out[kind].append(row)
    return out["request"], out["transfer"]
