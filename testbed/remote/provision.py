"""Apply playbooks/testbed.yml through ansible-runner: on this machine or an inventory.

Progress is one line per task and host as Ansible reports it; a failure names the host,
the task and Ansible's message. Remote hosts get the project as an archive of this
checkout (tracked files), unpacked to /opt/netkv-testbed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from testbed.remote.inventory import DEFAULT_PROJECT_DIR

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
PLAYBOOK = PLAYBOOKS / "testbed.yml"
LOCAL_INVENTORY = ("localhost ansible_connection=local "
                   "ansible_python_interpreter=/usr/bin/python3\n")


class ProvisionError(RuntimeError):
    pass


@dataclass
class Outcome:
    ok: bool
    stats: dict = field(default_factory=dict)  # host -> {ok, changed, failures, ...}
    failures: list[str] = field(default_factory=list)

    @property
    def changed(self) -> int:
        return sum(s.get("changed", 0) for s in self.stats.values())


def project_archive(dest: Path) -> Path:
    """A tar.gz of the checkout's tracked files (no .venv, no results)."""
    try:
        files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], check=True,
                               capture_output=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        files = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()
                 and not {".venv", "results", ".git"} & set(p.relative_to(ROOT).parts)]
    with tarfile.open(dest, "w:gz") as tar:
        for name in filter(None, files):
            if (ROOT / name).is_file():
                tar.add(ROOT / name, arcname=name)
    return dest


def _events(on_line: Callable[[str], None], failures: list[str]):
    def handle(event: dict) -> bool:
        data = event.get("event_data", {})
        kind = event.get("event", "")
        host, task = data.get("host", ""), data.get("task", "")
        if kind == "playbook_on_task_start":
            on_line(f"TASK {data.get('task', '')}")
        elif kind in ("runner_on_ok", "runner_on_skipped"):
            res = data.get("res", {})
            state = "skipped" if kind.endswith("skipped") else (
                "changed" if res.get("changed") else "ok")
            on_line(f"  {host}: {state}")
        elif kind in ("runner_on_failed", "runner_on_unreachable"):
            if data.get("ignore_errors"):
                return True
            res = data.get("res", {})
            msg = res.get("msg") or res.get("stderr") or res.get("stdout") or "failed"
            what = "unreachable" if kind.endswith("unreachable") else "failed"
            line = f"{host}: task '{task}' {what}: {str(msg).strip()[-600:]}"
            failures.append(line)
            on_line(f"  {line}")
        return True
    return handle


def provision(inventory: Path | None, check: bool = False, dev: bool = False,
              on_line: Callable[[str], None] = print) -> Outcome:
    import ansible_runner

    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="netkv-provision-") as tmp:
        tmpdir = Path(tmp)
        extravars = {"devtools_enabled": dev}
        if inventory is None:
            inv = tmpdir / "inventory.ini"
            inv.write_text(LOCAL_INVENTORY)
            extravars["project_dir"] = str(ROOT)
        else:
            inv = Path(inventory).resolve()
            if not inv.is_file():
                raise ProvisionError(f"{inventory}: inventory not found")
            extravars["project_archive"] = str(project_archive(tmpdir / "project.tar.gz"))
            # a host's netkv_project_dir, where every later command looks, else this
            extravars["netkv_default_project_dir"] = DEFAULT_PROJECT_DIR
        env = {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
               "ANSIBLE_ROLES_PATH": str(PLAYBOOKS / "roles"),
               "ANSIBLE_NOCOLOR": "1", "ANSIBLE_HOST_KEY_CHECKING": "True"}
        runner = ansible_runner.run(
            private_data_dir=str(tmpdir), playbook=str(PLAYBOOK),
            inventory=str(inv), extravars=extravars, envvars=env, quiet=True,
            cmdline="--check" if check else None,
            event_handler=_events(on_line, failures))
        stats = runner.stats or {}
        per_host: dict[str, dict] = {}
        for key in ("ok", "changed", "failures", "dark", "skipped"):
            for host, n in (stats.get(key) or {}).items():
                per_host.setdefault(host, {})[key] = n
        ok = runner.rc == 0 and not failures
        if not ok and not failures:
            failures.append(f"ansible-playbook exited {runner.rc} (status {runner.status})")
        return Outcome(ok, per_host, failures)
