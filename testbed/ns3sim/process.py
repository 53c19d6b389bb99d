"""The ns-3 program as a child process, spoken to a line at a time (kvnet/main.cc says the
protocol). The simulator is a process singleton, so every run gets its own; commands
that answer nothing are buffered and go with the next one that does.

Two deadlines keep a run from hanging on a program that never answers: its first line
must come within START_S (a program that is not this one, or one that waits on its
input, is stopped there), and while a command is worked on the program writes "beat"
every wall second, so a gap of PROGRESS_S means it stopped; a long simulation that keeps
beating is never stopped. Both are overridable by environment (seconds)."""

from __future__ import annotations

import os
import queue
import subprocess
import tempfile
import threading
from collections import deque
from pathlib import Path

PROTOCOL = 1  # kvnet/common.h's PROTOCOL: what `hello` answers
START_ENV, PROGRESS_ENV = "NETKV_NS3_START_S", "NETKV_NS3_PROGRESS_S"
START_S, PROGRESS_S = 60.0, 60.0


class Ns3Error(RuntimeError):
    """The ns-3 program refused a command or died; the message carries its words."""


def deadline(env: str, default: float) -> float:
    """A deadline from the environment, checked: a positive, finite number of seconds."""
    raw = os.environ.get(env)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (0 < value < 1e6):
        raise Ns3Error(f"{env}={raw}: expected seconds, a number above 0 and below 10^6")
    return value


class Ns3Process:
    def __init__(self, program: Path):
        self.program = Path(program)
        self.start_s = deadline(START_ENV, START_S)
        self.progress_s = deadline(PROGRESS_ENV, PROGRESS_S)
        # a small working folder: nothing of the caller's lies where ns-3 might look
        self._cwd = tempfile.TemporaryDirectory(prefix="netkv-ns3-")
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the child
        self.proc = subprocess.Popen([str(self.program)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._stderr,
                                     cwd=self._cwd.name, text=True, bufsize=1 << 16,
                                     errors="replace")
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._out: deque[str] = deque()
        self._heard = False
        self.requests = 0  # commands that waited for an answer

    def _read(self) -> None:
        for raw in self.proc.stdout:
            self._lines.put(raw.rstrip("\n"))
        self._lines.put(None)

    def _next(self) -> str | None:
        wait, env = ((self.progress_s, PROGRESS_ENV) if self._heard
                     else (self.start_s, START_ENV))
        try:
            line = self._lines.get(timeout=wait)
        except queue.Empty:
            self.proc.kill()
            said = ("did not answer within" if not self._heard
                    else "stopped answering: no line in")
            raise Ns3Error(f"the ns-3 program {self.program} {said} {wait:g} s (${env}); "
                           "stopped") from None
        self._heard = True
        return line

    def hello(self) -> None:
        """Check that the child is this project's program, of this protocol: its whole
        answer within the start-up deadline, its first line at once refused if foreign
        (a program that echoes or floods never gets to look busy)."""
        self.progress_s = min(self.progress_s, self.start_s)
        self.send("hello")
        try:
            self.proc.stdin.write("\n".join(self._out) + "\n")
            self.proc.stdin.flush()
            self._out.clear()
            first = self._next()
            if first is None:
                raise Ns3Error(self._death())
            if first == f"kvnet {PROTOCOL}" and self._next() == "end":
                self.progress_s = deadline(PROGRESS_ENV, PROGRESS_S)
                return
        except (Ns3Error, BrokenPipeError, OSError) as exc:
            if isinstance(exc, OSError) and not isinstance(exc, Ns3Error):
                exc = Ns3Error(self._death())
            raise Ns3Error(f"{self.program}: not the netkv ns-3 program ({exc})") from None
        self.proc.kill()
        raise Ns3Error(f"{self.program}: not the netkv ns-3 program of protocol {PROTOCOL} "
                       f"(it answered {str(first)[:120]!r} to hello)")

    def send(self, line: str) -> None:
        self._out.append(line)

    def ask(self, line: str) -> list[str]:
        """Send `line` (after whatever is buffered) and return the answer's lines."""
        self._out.append(line)
        self.requests += 1
        try:
            self.proc.stdin.write("\n".join(self._out) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise Ns3Error(self._death()) from None
        self._out.clear()
        lines = []
        while (text := self._next()) is not None:
            if text == "beat":
                continue
            if text == "end":
                return lines
            if text.startswith("error "):
                raise Ns3Error(f"ns-3 refused {line.split()[0]!r}: {text[6:]}")
            lines.append(text)
        raise Ns3Error(self._death())

    def _death(self) -> str:
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._stderr.seek(0)
        tail = self._stderr.read().decode(errors="replace").strip().splitlines()[-15:]
        return (f"the ns-3 program exited ({code}) mid-run" + (":\n" + "\n".join(tail)
                                                               if tail else ""))

    def peak_rss_kb(self) -> int | None:
        """The child's peak resident memory so far (VmHWM), while it lives."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        except OSError:
            return None
        return None

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()
        self._cwd.cleanup()


def check_program(program: Path) -> None:
    """Start the program once and check it answers hello: before a run makes a folder."""
    proc = Ns3Process(program)
    try:
        proc.hello()
    finally:
        proc.close()
