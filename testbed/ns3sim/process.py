"""The ns-3 program as a child process, spoken to a line at a time (kvnet/main.cc says the
protocol). The simulator is a process singleton, so every run gets its own; commands
that answer nothing are buffered and go with the next one that does."""

from __future__ import annotations

import subprocess
import tempfile
from collections import deque
from pathlib import Path


class Ns3Error(RuntimeError):
    """The ns-3 program refused a command or died; the message carries its words."""


class Ns3Process:
    def __init__(self, program: Path):
        # a small working folder: nothing of the caller's lies where ns-3 might look
        self._cwd = tempfile.TemporaryDirectory(prefix="netkv-ns3-")
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the child
        self.proc = subprocess.Popen([str(program)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._stderr,
                                     cwd=self._cwd.name, text=True, bufsize=1 << 16)
        self._out: deque[str] = deque()
        self.requests = 0  # commands that waited for an answer

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
        for raw in self.proc.stdout:
            text = raw.rstrip("\n")
            if text == "end":
                return lines
            if text.startswith("error "):
                raise Ns3Error(f"ns-3 refused {line.split()[0]!r}: {text[6:]}")
            lines.append(text)
        raise Ns3Error(self._death())

    def _death(self) -> str:
        code = self.proc.wait(timeout=30)
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
