"""Where the testbed keeps what it can make again: this user's cache folder."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache() -> Path:
    """$XDG_CACHE_HOME/netkv-testbed, else ~/.cache/netkv-testbed."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "netkv-testbed"
