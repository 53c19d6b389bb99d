"""Whether an inventory's servers can import what a run needs, asked before it starts.

A run over several servers (`--cluster`) starts workers from each server's own project
environment; a module missing there would fail its workers minutes into the run, after
the fabric is up. One SSH command per server answers it first.
"""

from __future__ import annotations

from pathlib import Path

from testbed.remote.inventory import is_local, load_hostvars, load_inventory, project_dir
from testbed.remote.ssh import RemoteError, RemoteHost


def servers_lacking(inventory: str | Path, module: str) -> dict[str, str]:
    """Server -> why it cannot import `module` in its project's .venv, for every server
    of the inventory other than this machine (unreachable ones included, with the
    reason)."""
    hostvars = load_hostvars(inventory)
    out: dict[str, str] = {}
    for name, spec in load_inventory(inventory).items():
        if is_local(name, hostvars[name]):
            continue
        python = f"{project_dir(hostvars[name])}/.venv/bin/python"
        try:
            with RemoteHost(spec) as host:
                got = host.run([python, "-c", f"import {module}"], check=False, timeout=120)
        except RemoteError as exc:
            out[name] = str(exc)
            continue
        if got.rc != 0:
            last = (got.err.strip().splitlines() or [f"exit {got.rc}"])[-1]
            out[name] = f"{python}: {last}"
    return out
