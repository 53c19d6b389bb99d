"""Progress on long runs: one bar over a run's cells, with a live line for packet runs.

Shared by the CLI and the Python API (`simulate(..., progress=True)`), so a script shows
the same bar as `testbed simulate`."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def live_line(doc: dict) -> str:
    """The router's live view in one line: the oracle's congestion per tier, transfers
    in flight, requests ended of those arrived."""
    congestion = doc.get("congestion") or {}
    tiers = " ".join(f"T{t} {float(c):.2f}" for t, c in sorted(congestion.items()))
    ended = f"{doc.get('ended', 0)}/{doc.get('expected') or doc.get('arrived', 0)} ended"
    return f"congestion {tiers or '-'} | {doc.get('in_flight', 0)} in flight | {ended}"


@dataclass
class Bar:
    """show(label): a label without a step; step(label): the previous cell is done and
    `label` runs now; live(doc): the live line (router's live.json); note(line): a line
    printed above the bar."""

    progress: Progress
    task: int
    seen: int = 0
    quiet: bool = False

    def note(self, line: str) -> None:
        """A line above the bar that stays (a plan, a look's verdicts)."""
        if not self.quiet:
            self.progress.console.print(line, highlight=False, markup=False)

    def show(self, label: str) -> None:
        self.progress.update(self.task, step=label)

    def step(self, label: str) -> None:
        if self.seen:
            self.progress.advance(self.task)
        self.seen += 1
        self.progress.update(self.task, step=label, live="")

    def live(self, doc: dict) -> None:
        self.progress.update(self.task, live=live_line(doc))


@contextlib.contextmanager
def progress_bar(title: str, total: int, disable: bool = False, console: Console | None = None):
    """A progress bar over a run's cells on stderr; yields a Bar."""
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("{task.fields[step]}"),
               TextColumn("[dim]{task.fields[live]}"))
    with Progress(*columns, console=console or Console(stderr=True),
                  disable=disable) as progress:
        task = progress.add_task(title, total=total, step="", live="")
        yield Bar(progress, task, quiet=disable)
        progress.update(task, completed=total, step="done", live="")
