"""Is an emulated host still there? Its network namespace lives as long as a process
in it does (the host's shell, the workers started inside it); when the last one exits
the kernel destroys the namespace and, with it, the host's veth. A run whose host is gone
can carry none of that host's transfers again, so it stops naming the host."""

from __future__ import annotations

from pathlib import Path


def interfaces(pid: int) -> set[str] | None:
    """The interfaces of the namespace `pid` lives in (None when the process is gone)."""
    try:
        lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
    except OSError:
        return None
    return {line.split(":", 1)[0].strip() for line in lines}


def host_gone(name: str, pid: int, expected: list[str]) -> str | None:
    """Why host `name` can no longer send (None while its namespace and interfaces stand)."""
    present = interfaces(pid)
    if present is None or not present:
        return (f"host {name} is gone: its network namespace went with its shell "
                f"(pid {pid}), and its transfers with it")
    missing = sorted(set(expected) - present)
    if missing:
        return f"host {name} lost its interface {', '.join(missing)}: nothing leaves it"
    return None
