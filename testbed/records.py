"""Run folders in the shared format (ARCHITECTURE.md, "Run records").

Every file is written atomically (temporary file, then rename). A folder carries a
PARTIAL marker from its creation until `finish()`, so an interrupted run leaves a
readable folder that says it is incomplete and why.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from itertools import repeat
from pathlib import Path

import numpy as np

from testbed import inputs

REQUEST_FIELDS = [
    "id", "arrival", "input_len", "output_len", "measured", "prefill", "decode", "tier",
    "hit_tokens", "reuse_tokens", "kv_bytes", "transfer_bytes", "prefill_start", "prefill_end",
    "transfer_start", "transfer_end", "predicted_transfer_s", "first_token", "done", "ttft",
    "tbt", "slo_s", "slo_met", "state", "reason", "recovery", "scheduler_fault",
]
TRANSFER_FIELDS = ["request", "shard", "src", "dst", "tier", "path", "bytes", "start", "end"]
# packets only: the sender's TCP_INFO per connection (testbed/workers/tcpinfo.py) and the
# time its thread waited for a core while sending (testbed/workers/lateness.py)
SENDER_FIELDS = ["retrans_segs", "timeouts", "timeout_s", "rtt_s", "min_rtt_s", "cpu_wait_s"]
LINK_FIELDS = ["time", "link", "tier", "capacity_gbps", "kv_util", "bg_util", "measured"]
PARTIAL = "PARTIAL"


class LinkSamples:
    """links.csv rows kept as columns: one utilisation sample of every link per period.

    A 8192-GPU fabric has 16,384 directed links: a minute of samples is a million rows,
    half a gigabyte as dicts and as much again when a worker process hands them back.
    As arrays it is two floats a link a sample; rows are made only when iterated
    (written to links.csv), and per-tier samples come straight from the columns."""

    def __init__(self, names: Sequence[str], tiers: Sequence[int],
                 capacity_gbps: Sequence[float]):
        self.names = list(names)
        self.tiers = np.asarray(tiers, dtype=np.int64)
        self.capacity_gbps = list(capacity_gbps)
        self._samples: list[tuple[float, bool, np.ndarray, np.ndarray]] = []

    def add(self, time: float, measured: bool, kv_util: np.ndarray,
            bg_util: np.ndarray) -> None:
        self._samples.append((time, measured, kv_util, bg_util))

    def __len__(self) -> int:
        return len(self._samples) * len(self.names)

    def __iter__(self) -> Iterator[dict]:
        tiers = self.tiers.tolist()
        for time, measured, kv, bg in self._samples:
            for name, tier, cap, k, b in zip(self.names, tiers, self.capacity_gbps,
                                             kv.tolist(), bg.tolist(), strict=True):
                yield {"time": time, "link": name, "tier": tier, "capacity_gbps": cap,
                       "kv_util": k, "bg_util": b, "measured": measured}

    def csv_rows(self, fields: Sequence[str]) -> Iterator[tuple]:
        """The rows as `fields`-ordered tuples, without a dict per row (write_csv); what
        repeats is formatted once, as the csv writer would (str)."""
        tiers = [str(t) for t in self.tiers.tolist()]
        capacity = [str(c) for c in self.capacity_gbps]
        for time, measured, kv, bg in self._samples:
            columns = {"time": repeat(str(time)), "link": self.names, "tier": tiers,
                       "capacity_gbps": capacity, "kv_util": kv.tolist(),
                       "bg_util": bg.tolist(), "measured": repeat(str(measured))}
            yield from zip(*(columns[f] for f in fields), strict=False)  # repeat() is endless

    def tier_samples(self) -> dict[int, list[float]]:
        """Tier -> the measured samples' kv + bg utilisation (as the rows would give)."""
        out: dict[int, list[float]] = {}
        for tier in np.unique(self.tiers).tolist():
            at = self.tiers == tier
            values = [(kv[at] + bg[at]).tolist() for _, measured, kv, bg in self._samples
                      if measured]
            if values:
                out[tier] = [v for part in values for v in part]
        return out


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _clean(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def write_json(path: Path, data) -> None:
    atomic_write(path, json.dumps(_clean(data), indent=2, sort_keys=False) + "\n")


def write_csv(path: Path, rows: Sequence[dict], fields: Sequence[str]) -> None:
    """Rows as dicts, the named fields in order (a missing or None field left empty);
    the plain csv writer on lists: a million link samples are written in seconds."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    fields = list(fields)
    writer.writerow(fields)
    if hasattr(rows, "csv_rows"):  # columns (LinkSamples): no dict per row
        writer.writerows(rows.csv_rows(fields))
    else:
        writer.writerows(["" if (v := row.get(k)) is None else v for k in fields]
                         for row in rows)
    atomic_write(path, buf.getvalue())


# what every reader of a record takes for granted: a file without them is refused by name
NEEDED = {"transfers.csv": ("request", "shard", "tier", "bytes", "start", "end"),
          "requests.csv": ("id", "arrival", "input_len", "output_len")}


# the figures every reader converts: a finite number at least 0 (int: a whole one) or empty
FIGURES = {"transfers.csv": (("shard", int), ("tier", int), ("bytes", float),
                             ("start", float), ("end", float)),
           "requests.csv": (("arrival", float), ("input_len", int), ("output_len", int))}


def read_csv(path: Path, columns: tuple[str, ...] = ()) -> list[dict]:
    """A record's rows; a damaged file (a column its readers need gone, a row cut short,
    a figure that is no finite number) is an InputError naming it, the line and field."""
    name = Path(path).name
    rows = inputs.read_csv(path, columns or NEEDED.get(name, ()))
    figures = FIGURES.get(name, ())
    for line, row in enumerate(rows if figures else (), start=2):
        for field, kind in figures:
            value = row.get(field)
            if value not in (None, "") and not _figure(value, kind):
                raise inputs.InputError(f"{path}:{line}: {field}: {value[:40]!r} is not a "
                                        f"finite {'whole ' if kind is int else ''}number >= 0")
    return rows


def _figure(text: str, kind: type) -> bool:
    try:
        x = float(text)
    except ValueError:
        return False
    return math.isfinite(x) and x >= 0 and (kind is float or x == int(x))


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


class Terminated(BaseException):
    """SIGTERM, raised from the handler so every `finally` (teardowns) runs and the run
    folder can say why it stopped. A BaseException: no `except Exception` swallows it."""

    def __str__(self) -> str:
        return "terminated by SIGTERM"


def raise_terminated(signum, _frame):
    """A SIGTERM handler: every teardown runs, as on Ctrl-C."""
    raise Terminated(signum)


def interruption(exc: BaseException) -> str:
    """Why a run stopped early, for PARTIAL."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted by SIGINT (Ctrl-C)"
    if isinstance(exc, Terminated):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


# a packet-level run writes its departure trace (tens of MB a run), logs and records
# under --out as it goes: less free space than this is refused before the fabric starts
PACKET_RUN_MIN_FREE = 256 * 2**20
FULL_BELOW = 2**20  # a disk with less free is full for our purposes


def free_bytes(path: Path) -> int:
    """Free bytes on the file system that holds `path` (or its nearest existing parent)."""
    path = Path(path).resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def check_room(out_root: Path, need: int, what: str) -> None:
    """ValueError (a named error, nothing started) when `out_root` has less than `need`."""
    free = free_bytes(out_root)
    if free < need:
        raise ValueError(f"--out {out_root}: {free / 2**20:.0f} MB free, and {what} needs at "
                         f"least {need / 2**20:.0f} MB there (its traces, logs and records); "
                         "free some space or give another --out")


class RunFolder:
    """results/<scenario>-<engine>-<stamp>/, marked partial until finished."""

    def __init__(self, root: Path, scenario_name: str, engine: str):
        base = root / f"{scenario_name}-{engine}-{stamp()}"
        path, n = base, 1
        while path.exists():
            n += 1
            path = base.with_name(f"{base.name}-{n}")
        self.path = path
        self.path.mkdir(parents=True)
        atomic_write(self.path / PARTIAL, "run started; not finished\n")

    def mark_interrupted(self, reason: str) -> None:
        # on a full disk the PARTIAL written at the start stays, saying less
        with contextlib.suppress(OSError):
            atomic_write(self.path / PARTIAL, f"run interrupted: {reason}\n")

    def finish(self) -> None:
        (self.path / PARTIAL).unlink(missing_ok=True)

    def discard(self) -> None:
        """A run that recorded nothing leaves no folder."""
        shutil.rmtree(self.path, ignore_errors=True)

    def recorded(self) -> bool:
        """Whether any run has left a record here (a finished cell, or what an
        interrupted packet run journalled of its requests)."""
        return any(p.is_file() for p in self.path.glob("cells/*/*/seed*/*"))

    @property
    def partial(self) -> bool:
        return (self.path / PARTIAL).exists()

    def write_cell(self, rel: str, requests, transfers, links, summary: dict) -> Path:
        return write_cell(self.path / rel, requests, transfers, links, summary)


def write_cell(cell: Path, requests, transfers, links, summary: dict) -> Path:
    """One run's records in its cell folder (a worker on this machine writes its own,
    so that records neither travel back nor queue behind one writer)."""
    write_csv(cell / "requests.csv", requests, REQUEST_FIELDS)
    tcp = SENDER_FIELDS if any("retrans_segs" in t for t in transfers) else []
    write_csv(cell / "transfers.csv", transfers, TRANSFER_FIELDS + tcp)
    write_csv(cell / "links.csv", links, LINK_FIELDS)
    write_json(cell / "summary.json", summary)
    return cell


@contextlib.contextmanager
def unchanged_on_failure(folder: Path):
    """A command that rewrites a finished folder leaves it exactly as it was when it fails
    or is interrupted: the tree is hard-linked aside first (every write here replaces a
    file by rename, so the links keep the old contents) and put back on failure."""
    folder = Path(folder)
    if not folder.is_dir():
        yield
        return
    aside = folder.parent / f".{folder.name}.before-{os.getpid()}"
    shutil.rmtree(aside, ignore_errors=True)
    shutil.copytree(folder, aside, copy_function=os.link, symlinks=True)
    try:
        yield
    except BaseException:
        failed = folder.parent / f".{folder.name}.failed-{os.getpid()}"
        os.replace(folder, failed)
        os.replace(aside, folder)
        shutil.rmtree(failed, ignore_errors=True)
        raise
    shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def kept_if_recorded(folder: Path):
    """A command's new folder that fails before its first run is recorded (no file in any
    cell folder in it) is removed: no folder of nothing is left behind."""
    try:
        yield
    except BaseException:
        if not any(p.is_file() for p in Path(folder).glob("**/cells/*/*/seed*/*")):
            shutil.rmtree(folder, ignore_errors=True)
        raise
