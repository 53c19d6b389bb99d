"""Driving `vagrant` for a checkout's VMs: up, ssh, host keys, destroy.

The Vagrantfile is the interface (its NETKV_VM_* variables); this module only runs the
vagrant command line and reads what it prints, so a user's `vagrant up` and the tests'
are the same thing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ABORT_POLL_S = 5.0  # how often the watchdog asks whether to stop a command


class VagrantError(RuntimeError):
    """A vagrant command failed: names the command and its last lines."""


@dataclass
class Vagrant:
    """The VMs of one Vagrantfile folder, with the NETKV_VM_* settings in `env`."""

    folder: Path
    env: dict[str, str] = field(default_factory=dict)

    def _env(self) -> dict[str, str]:
        return {**os.environ, "VAGRANT_DEFAULT_PROVIDER": "libvirt", **self.env}

    def run(self, *args: str, timeout: float = 3600,
            on_line: Callable[[str], None] | None = None,
            abort: Callable[[], str | None] | None = None) -> str:
        """`vagrant ARGS`, output streamed to on_line; raises VagrantError on failure.

        A watchdog ends the command at `timeout` seconds, or as soon as `abort()` names a
        reason (polled every few seconds): a guest that hangs prints nothing, so a
        deadline that waited for the output's end would never come."""
        proc = subprocess.Popen(["vagrant", *args], cwd=self.folder, env=self._env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        stopped: list[str] = []
        done = threading.Event()

        def watch() -> None:
            deadline = time.monotonic() + timeout
            while not done.wait(min(ABORT_POLL_S, max(0.0, deadline - time.monotonic()))):
                why = (f"no end after {timeout:.0f} s" if time.monotonic() >= deadline
                       else abort() if abort else None)
                if why:
                    stopped.append(why)
                    _kill(proc)
                    return

        watchdog = threading.Thread(target=watch, daemon=True)
        watchdog.start()
        lines: list[str] = []
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                if on_line:
                    on_line(line.rstrip("\n"))
            proc.wait()
        except BaseException:
            _kill(proc)
            proc.wait()
            raise
        finally:
            done.set()
            watchdog.join()
        tail = "\n".join(lines[-25:])
        if stopped:
            raise VagrantError(f"vagrant {' '.join(args)} stopped ({stopped[0]}):\n{tail}")
        if proc.returncode != 0:
            raise VagrantError(f"vagrant {' '.join(args)} exited {proc.returncode}:\n{tail}")
        return "\n".join(lines)

    def up(self, *names: str, provision: bool = True, on_line=None) -> str:
        flag = "--provision" if provision else "--no-provision"
        return self.run("up", flag, *names, on_line=on_line)

    def ssh(self, name: str, command: str, timeout: float = 600, on_line=None,
            abort=None) -> str:
        """A shell command line in the VM, as the vagrant user (sudo works without a
        password); raises VagrantError when it exits non-zero or is stopped."""
        return self.run("ssh", name, "-c", command, "--", "-q", timeout=timeout,
                        on_line=on_line, abort=abort)

    def host_key(self, name: str, kind: str = "ed25519") -> str:
        """The VM's SSH host public key, read through Vagrant's own connection (which
        authenticates with the key Vagrant put there): the way to learn a host key
        before trusting it in a known_hosts file."""
        return self.ssh(name, f"cat /etc/ssh/ssh_host_{kind}_key.pub").strip().splitlines()[-1]

    def destroy(self) -> str:
        return self.run("destroy", "--force", timeout=900)


def _kill(proc: subprocess.Popen) -> None:
    """vagrant and what it started (its ssh): they share the session it leads."""
    with contextlib.suppress(ProcessLookupError):  # it had ended
        os.killpg(proc.pid, signal.SIGKILL)
