"""Children of the orchestrator die with it, even when it is SIGKILLed."""

from __future__ import annotations

import ctypes
import os
import signal


def die_with_parent() -> None:
    """Child side (a Popen preexec_fn): SIGTERM when the parent dies; own session, so a
    Ctrl-C on the terminal reaches the orchestrator only, which stops children in order."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    os.setsid()


def stop(proc, timeout: float = 5.0) -> None:
    """SIGTERM a child (it tears down what it holds), SIGKILL it after `timeout`."""
    import subprocess

    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
