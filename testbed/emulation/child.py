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
