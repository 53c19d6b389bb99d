"""A real OpenSSH server on loopback for tests: generated host and client keys."""

from __future__ import annotations

import getpass
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def sshd_missing() -> str | None:
    if not Path(SSHD).exists() or shutil.which("ssh-keygen") is None:
        return "OpenSSH server not installed (./run.sh setup installs openssh-server)"
    return None


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


@dataclass
class Sshd:
    port: int
    host_key: Path
    client_key: Path
    known_hosts: Path
    user: str
    proc: subprocess.Popen

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sshd(tmp: Path) -> Sshd:
    tmp.mkdir(parents=True, exist_ok=True)
    host_key = keygen(tmp / "host_key")
    client_key = keygen(tmp / "client_key")
    (tmp / "authorized_keys").write_text((tmp / "client_key.pub").read_text())
    (tmp / "authorized_keys").chmod(0o600)
    port = free_port()
    config = tmp / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}",
        f"AuthorizedKeysFile {tmp / 'authorized_keys'}", f"PidFile {tmp / 'sshd.pid'}",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
        "StrictModes no", "PermitRootLogin prohibit-password", "Subsystem sftp internal-sftp",
        "LogLevel ERROR", ""]))
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited: {proc.stdout.read().decode()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.05)
    pub = (tmp / "host_key.pub").read_text().split()
    known = tmp / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {pub[0]} {pub[1]}\n")
    return Sshd(port, host_key, client_key, known, getpass.getuser(), proc)
