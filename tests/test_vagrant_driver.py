"""The vagrant driver's watchdog, with a stand-in `vagrant` on PATH: a command whose
guest hangs prints nothing, and must still end at its deadline or when asked."""

from __future__ import annotations

import os
import stat
import time

import pytest

from testbed.vm import vagrant as driver
from testbed.vm.vagrant import Vagrant, VagrantError


@pytest.fixture
def fake_vagrant(tmp_path, monkeypatch):
    """A `vagrant` that prints a line, then runs what FAKE_VAGRANT says (a shell line)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "vagrant"
    script.write_text("#!/bin/sh\necho started \"$@\"\neval \"$FAKE_VAGRANT\"\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(driver, "ABORT_POLL_S", 0.1)
    return tmp_path


def _vagrant(folder, line: str) -> Vagrant:
    return Vagrant(folder, {"FAKE_VAGRANT": line})


def test_a_silent_hang_ends_at_the_deadline_with_its_child(fake_vagrant):
    """The deadline holds though the command prints nothing and its child (the ssh
    vagrant would start) keeps the output open."""
    pid_file = fake_vagrant / "child.pid"
    vm = _vagrant(fake_vagrant, f"sleep 60 & echo $! > {pid_file}; wait")
    started = time.monotonic()
    with pytest.raises(VagrantError, match=r"stopped \(no end after 1 s\)") as err:
        vm.ssh("vm1", "true", timeout=1)
    assert time.monotonic() - started < 10
    assert "started ssh vm1" in str(err.value)  # its last lines are kept
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{child}") and "Z" not in _state(child):
        assert time.monotonic() < deadline, "the command's child outlived it"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_abort_stops_a_command_with_the_reason_it_names(fake_vagrant):
    asked = []

    def abort():
        asked.append(1)
        return "vm1's kernel locked up" if len(asked) >= 3 else None

    with pytest.raises(VagrantError, match=r"stopped \(vm1's kernel locked up\)"):
        _vagrant(fake_vagrant, "sleep 60").ssh("vm1", "true", timeout=60, abort=abort)
    assert len(asked) == 3


def test_a_command_that_ends_returns_its_output_or_names_its_exit(fake_vagrant):
    assert _vagrant(fake_vagrant, "echo done").run("status", abort=lambda: None) \
        == "started status\ndone"
    with pytest.raises(VagrantError, match="exited 3"):
        _vagrant(fake_vagrant, "exit 3").run("status")
