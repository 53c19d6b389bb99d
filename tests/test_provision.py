"""Provisioning: the playbooks lint and parse, the Vagrantfile validates, and applying the
playbook to this machine is clean in check mode and idempotent for real (root)."""

from __future__ import annotations

import hashlib
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


NO_PROVIDER = "No usable default provider could be found"


def _vagrant_validate(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["vagrant", "validate", *args], cwd=folder, capture_output=True,
                          text=True, timeout=120)


@_needs("vagrant")
def test_vagrantfile_validates_without_a_provider():
    # --ignore-provider checks the Vagrantfile alone: a machine without VirtualBox or
    # libvirt (a fresh CI machine) can still tell a broken Vagrantfile from a good one.
    done = _vagrant_validate(ROOT, "--ignore-provider")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "validated successfully" in done.stdout


@_needs("vagrant")
def test_vagrantfile_validates_with_the_provider_where_there_is_one():
    done = _vagrant_validate(ROOT)
    if done.returncode != 0 and NO_PROVIDER in done.stdout + done.stderr:
        pytest.skip("no VM provider (VirtualBox or libvirt) on this machine: the Vagrantfile "
                    "was validated without one (test_vagrantfile_validates_without_a_provider)")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "validated successfully" in done.stdout


BROKEN = {
    # an unknown setting: Vagrant's own config validation must name it
    "unknown setting": ('node.vm.hostname = vm_name',
                        'node.vm.hostname = vm_name\n      node.vm.no_such_setting = 1',
                        "no_such_setting"),
    # a Ruby syntax error: the file does not load at all
    "syntax error": ('Vagrant.configure("2") do |config|', 'Vagrant.configure("2") do |config',
                     "syntax error"),
}


@_needs("vagrant")
@pytest.mark.parametrize("breakage", sorted(BROKEN))
def test_a_broken_vagrantfile_fails_validation(breakage, tmp_path):
    old, new, named = BROKEN[breakage]
    text = (ROOT / "Vagrantfile").read_text()
    assert old in text, f"the Vagrantfile changed; update BROKEN[{breakage!r}]"
    (tmp_path / "Vagrantfile").write_text(text.replace(old, new, 1))
    done = _vagrant_validate(tmp_path, "--ignore-provider")
    assert done.returncode != 0, done.stdout
    assert named in (done.stdout + done.stderr).lower(), done.stdout + done.stderr


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


def _task_states(lines: list[str]) -> dict[str, str]:
    """TASK name -> the state the run reported for it (from provision's progress lines)."""
    states: dict[str, str] = {}
    task = ""
    for line in lines:
        if line.startswith("TASK "):
            task = line[5:]
        elif line.startswith("  localhost: ") and task:
            states[task] = line.split(": ", 1)[1]
    return states


INSTALL = "Install the project and its pinned dependencies when the recipe changed"


@root
@pytest.mark.root
@pytest.mark.slow
def test_a_real_apply_is_idempotent_and_check_mode_predicts_it():
    from testbed.remote.provision import provision

    provision(None, dev=True, on_line=lambda _l: None)  # converge (usually already is)
    again = provision(None, dev=True, on_line=lambda _l: None)
    assert again.ok, again.failures
    assert again.changed == 0, again.stats
    lines: list[str] = []
    check = provision(None, check=True, dev=True, on_line=lines.append)
    assert check.ok, check.failures
    # check mode must report what a real run would do: nothing
    assert check.changed == 0, {t: s for t, s in _task_states(lines).items() if s == "changed"}
    assert subprocess.run(["ovs-vsctl", "--timeout=5", "show"]).returncode == 0


def test_pyproject_holds_only_what_installs():
    # its hash names the venv's stamp and keys the VM box: a test or lint setting kept in
    # it would rebuild both (a pytest option once cost CI a 1.3 GB box rebuild)
    import tomllib

    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert set(doc) <= {"build-system", "project", "tool"}, set(doc)
    assert set(doc.get("tool", {})) <= {"setuptools"}, set(doc["tool"])
    assert (ROOT / "pytest.ini").is_file() and (ROOT / "ruff.toml").is_file()


@root
@pytest.mark.root
def test_check_mode_reports_a_reinstall_when_the_recipe_changed():
    from testbed.remote.provision import provision

    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    stamp = ROOT / ".venv" / f".installed-{digest}"
    assert stamp.is_file(), "./run.sh setup records the recipe it installed"
    aside = stamp.with_name(".recipe-moved-aside-by-a-test")
    stamp.rename(aside)  # as if pyproject.toml had changed since the install
    try:
        lines: list[str] = []
        check = provision(None, check=True, dev=True, on_line=lines.append)
    finally:
        aside.rename(stamp)
    assert check.ok, check.failures
    states = _task_states(lines)
    assert states[INSTALL] == "changed", states


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


def test_the_local_box_carries_every_package_the_playbook_installs():
    """A VM from the local box skips the package-list refresh (its netkv_box fact lists
    what it holds): that is only safe while the box's recipe has every package the
    playbook's roles install."""
    import yaml

    from testbed.vm.box import BASE_PACKAGES, PLAYBOOK_PACKAGES

    wanted = set(yaml.safe_load((PLAYBOOKS / "roles/packages/defaults/main.yml").read_text())
                 ["packages_list"])
    for role in ("openvswitch", "prometheus"):
        for task in yaml.safe_load((PLAYBOOKS / f"roles/{role}/tasks/main.yml").read_text()):
            names = task.get("ansible.builtin.apt", {}).get("name", [])
            wanted |= {names} if isinstance(names, str) else set(names)
    assert "prometheus" in wanted and "mininet" in wanted
    assert wanted <= set(BASE_PACKAGES + PLAYBOOK_PACKAGES), \
        wanted - set(BASE_PACKAGES + PLAYBOOK_PACKAGES)


def test_a_host_s_project_dir_is_where_provision_puts_it(tmp_path):
    # the playbook's own default, evaluated by Ansible per host as provision -i calls it:
    # a host's netkv_project_dir (where every later command looks) wins, else the default
    from testbed.remote.inventory import DEFAULT_PROJECT_DIR, project_dir

    (tmp_path / "hosts.yml").write_text(
        "all:\n  vars: {ansible_connection: local, ansible_python_interpreter: "
        f"{sys.executable}}}\n  hosts:\n    a: {{netkv_project_dir: /srv/netkv}}\n    b: {{}}\n")
    (tmp_path / "show.yml").write_text(
        f"- hosts: all\n  gather_facts: false\n  vars_files: "
        f"[{PLAYBOOKS}/roles/project/defaults/main.yml]\n"
        "  tasks:\n    - ansible.builtin.debug: {msg: 'DIR={{ project_dir }}'}\n")
    done = subprocess.run([str(BIN / "ansible-playbook"), "-i", "hosts.yml", "show.yml",
                           "-e", f"netkv_default_project_dir={DEFAULT_PROJECT_DIR}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    assert '"msg": "DIR=/srv/netkv"' in done.stdout
    assert f'"msg": "DIR={DEFAULT_PROJECT_DIR}"' in done.stdout
    assert project_dir({"netkv_project_dir": "/srv/netkv"}) == "/srv/netkv"
    assert project_dir({}) == DEFAULT_PROJECT_DIR
