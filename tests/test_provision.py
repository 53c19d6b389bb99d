"""Provisioning: the playbooks lint and parse, the Vagrantfile validates, and applying the
playbook to this machine is clean in check mode and idempotent for real (root)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

BIN = Path(sys.executable).parent
PLAYBOOKS = ROOT / "playbooks"


def _missing(tool: str) -> str | None:
    if shutil.which(tool) is None and not (BIN / tool).exists():
        return f"{tool} is not installed (./run.sh setup installs it)"
    return None


def _needs(tool: str):
    reason = _missing(tool)
    if reason and os.environ.get("CI"):
        return pytest.mark.usefixtures()  # CI must have it: let the test fail loudly
    return pytest.mark.skipif(reason is not None, reason=str(reason))


@_needs("vagrant")
def test_vagrantfile_validates():
    done = subprocess.run(["vagrant", "validate"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "validated successfully" in done.stdout


def test_playbook_syntax_check_passes():
    done = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,",
                           "testbed.yml"], cwd=PLAYBOOKS, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "ANSIBLE_ROLES_PATH": "roles"})
    assert done.returncode == 0, done.stdout + done.stderr


@_needs("ansible-lint")
def test_playbooks_pass_ansible_lint():
    done = subprocess.run([str(BIN / "ansible-lint"), "--offline", "--nocolor", "testbed.yml"],
                          cwd=PLAYBOOKS, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


root = pytest.mark.skipif(os.geteuid() != 0 and not os.environ.get("CI"),
                          reason="provisioning this machine needs root (apt, services)")


@root
@pytest.mark.root
@pytest.mark.slow
def test_local_check_mode_reports_no_errors_and_a_real_apply_is_idempotent():
    from testbed.remote.provision import provision

    check = provision(None, check=True, dev=True, on_line=lambda _l: None)
    assert check.ok, check.failures
    provision(None, dev=True, on_line=lambda _l: None)  # converge (usually already is)
    again = provision(None, dev=True, on_line=lambda _l: None)
    assert again.ok, again.failures
    assert again.changed == 0, again.stats
    assert subprocess.run(["ovs-vsctl", "--timeout=5", "show"]).returncode == 0


@root
@pytest.mark.root
def test_an_unreachable_host_fails_naming_the_host_and_task(tmp_path):
    from testbed.remote.provision import provision

    inv = tmp_path / "inventory.yml"
    inv.write_text("all:\n  hosts:\n    ghost:\n      ansible_host: 127.0.0.1\n"
                   "      ansible_port: 9\n")  # discard port: nothing listens
    outcome = provision(inv, on_line=lambda _l: None)
    assert not outcome.ok
    assert any(line.startswith("ghost: task 'Gathering Facts' unreachable")
               for line in outcome.failures), outcome.failures
