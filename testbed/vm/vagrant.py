"""Driving `vagrant` for a checkout's VMs: up, ssh, host keys, destroy.

The Vagrantfile is the interface (its NETKV_VM_* variables); this module only runs the
vagrant command line and reads what it prints, so a user's `vagrant up` and the tests'
are the same thing.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


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
            on_line: Callable[[str], None] | None = None) -> str:
        """`vagrant ARGS`, output streamed to on_line; raises VagrantError on failure."""
        proc = subprocess.Popen(["vagrant", *args], cwd=self.folder, env=self._env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL)
        lines: list[str] = []
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                if on_line:
                    on_line(line.rstrip("\n"))
            proc.wait(timeout=timeout)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        if proc.returncode != 0:
            tail = "\n".join(lines[-25:])
            raise VagrantError(f"vagrant {' '.join(args)} exited {proc.returncode}:\n{tail}")
        return "\n".join(lines)

    def up(self, *names: str, provision: bool = True, on_line=None) -> str:
        flag = "--provision" if provision else "--no-provision"
        return self.run("up", flag, *names, on_line=on_line)

    def ssh(self, name: str, command: str, timeout: float = 1800, on_line=None) -> str:
        """A shell command line in the VM, as the vagrant user (sudo works without a
        password); raises VagrantError when it exits non-zero."""
        return self.run("ssh", name, "-c", command, "--", "-q", timeout=timeout,
                        on_line=on_line)

    def host_key(self, name: str, kind: str = "ed25519") -> str:
        """The VM's SSH host public key, read through Vagrant's own connection (which
        authenticates with the key Vagrant put there): the way to learn a host key
        before trusting it in a known_hosts file."""
        return self.ssh(name, f"cat /etc/ssh/ssh_host_{kind}_key.pub").strip().splitlines()[-1]

    def destroy(self) -> str:
        return self.run("destroy", "--force", timeout=900)
