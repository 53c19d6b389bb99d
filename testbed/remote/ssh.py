"""Remote hosts over SSH (paramiko): run, start, stop, stream logs, collect run records.

Safe by default: an unknown host key is refused (RejectPolicy; known hosts come from
~/.ssh/known_hosts, /etc/ssh/ssh_known_hosts and the inventory's file), keys come from
the inventory or the usual places (agent, ~/.ssh/id_*), every command is an argument
list quoted with shlex.join (never a string pasted into a shell), and nothing secret
(passwords, key passphrases, key material) is logged or put in an error message.
"""

from __future__ import annotations

import shlex
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import paramiko


class RemoteError(RuntimeError):
    """A remote host or command failed; the message names the host and what to do."""


@dataclass(frozen=True)
class HostSpec:
    name: str
    host: str
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    known_hosts: str | None = None

    @property
    def where(self) -> str:
        return f"{self.name} ({self.user + '@' if self.user else ''}{self.host}:{self.port})"


@dataclass(frozen=True)
class Result:
    rc: int
    out: str
    err: str


class RemoteHost:
    def __init__(self, spec: HostSpec, timeout: float = 10.0):
        self.spec = spec
        self.timeout = timeout
        self.client = paramiko.SSHClient()
        self.client.load_system_host_keys()
        if spec.known_hosts and not Path(spec.known_hosts).is_file():
            raise RemoteError(f"{spec.where}: known-hosts file {spec.known_hosts} not found")
        for extra in ("/etc/ssh/ssh_known_hosts", spec.known_hosts):
            if extra and Path(extra).is_file():
                self.client.load_host_keys(extra)
        self.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        self._connected = False

    # -- connection ----------------------------------------------------------------------
    def connect(self) -> RemoteHost:
        s = self.spec
        try:
            self.client.connect(s.host, port=s.port, username=s.user, key_filename=s.key_file,
                                look_for_keys=s.key_file is None, allow_agent=s.key_file is None,
                                timeout=self.timeout, banner_timeout=self.timeout,
                                auth_timeout=self.timeout)
        except paramiko.BadHostKeyException:
            raise RemoteError(f"{s.where}: the host key does not match the known one; "
                              "if the host was rebuilt, remove its old entry "
                              "(ssh-keygen -R) and check the new key") from None
        except paramiko.SSHException as exc:
            if "not found in known_hosts" in str(exc):
                raise RemoteError(
                    f"{s.where}: unknown host key, refused. Verify it and add it: "
                    f"ssh-keyscan -p {s.port} {s.host} >> ~/.ssh/known_hosts (or the "
                    "inventory's netkv_known_hosts file)") from None
            if isinstance(exc, paramiko.AuthenticationException):
                raise RemoteError(f"{s.where}: authentication failed (key refused); check "
                                  "the user and ansible_ssh_private_key_file") from None
            raise RemoteError(f"{s.where}: SSH failed: {exc}") from None
        except OSError as exc:
            raise RemoteError(f"{s.where}: unreachable: {exc.strerror or exc}") from None
        self._connected = True
        return self

    def close(self) -> None:
        self.client.close()
        self._connected = False

    def __enter__(self) -> RemoteHost:
        return self if self._connected else self.connect()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- commands ------------------------------------------------------------------------
    def run(self, argv: list[str], check: bool = True, timeout: float | None = 600) -> Result:
        """Run an argument list; every argument is quoted, so nothing is shell syntax."""
        _, stdout, stderr = self.client.exec_command(shlex.join(argv), timeout=timeout)
        out, err = stdout.read().decode(errors="replace"), stderr.read().decode(errors="replace")
        rc = stdout.channel.recv_exit_status()
        if check and rc != 0:
            raise RemoteError(f"{self.spec.where}: `{shlex.join(argv[:3])}...` exited {rc}: "
                              f"{err.strip()[-500:]}")
        return Result(rc, out, err)

    def stream(self, argv: list[str], on_line: Callable[[str], None]) -> int:
        """Run and hand every output line (stdout and stderr merged) as it comes."""
        channel = self.client.get_transport().open_session()
        channel.set_combine_stderr(True)
        channel.exec_command(shlex.join(argv))
        buf = b""
        for chunk in iter(lambda: channel.recv(4096), b""):
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                on_line(line.decode(errors="replace"))
        if buf:
            on_line(buf.decode(errors="replace"))
        return channel.recv_exit_status()

    def start(self, argv: list[str], log: str) -> int:
        """Start a detached process whose output goes to `log`; return its pid."""
        script = (f"nohup {shlex.join(argv)} > {shlex.quote(log)} 2>&1 < /dev/null & "
                  "echo $!")
        out = self.run(["sh", "-c", script]).out.strip()
        if not out.isdigit():
            raise RemoteError(f"{self.spec.where}: could not start {argv[0]}: {out!r}")
        return int(out)

    def stop(self, pid: int, grace_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after grace_s if still alive."""
        script = (f"kill -TERM {int(pid)} 2>/dev/null || exit 0; "
                  f"for i in $(seq {max(1, int(grace_s * 10))}); do "
                  f"kill -0 {int(pid)} 2>/dev/null || exit 0; sleep 0.1; done; "
                  f"kill -KILL {int(pid)} 2>/dev/null; exit 0")
        self.run(["sh", "-c", script])

    def follow(self, path: str, on_line: Callable[[str], None], until: Callable[[], bool],
               poll_s: float = 0.2) -> None:
        """Stream a remote log as it grows, until `until()` is true."""
        import time

        sftp = self.client.open_sftp()
        try:
            with sftp.open(path, "r") as fh:
                buf = b""
                while True:
                    chunk = fh.read(65536)
                    if chunk:
                        buf += chunk
                        *lines, buf = buf.split(b"\n")
                        for line in lines:
                            on_line(line.decode(errors="replace"))
                    elif until():
                        break
                    else:
                        time.sleep(poll_s)
                if buf:
                    on_line(buf.decode(errors="replace"))
        finally:
            sftp.close()

    # -- files ---------------------------------------------------------------------------
    def collect(self, remote_dir: str, local_dir: Path) -> int:
        """Copy a remote folder (e.g. a run folder) here, recursively; return file count."""
        sftp = self.client.open_sftp()
        count = 0
        try:
            root = Path(local_dir).resolve()

            def walk(src: str, dst: Path) -> None:
                nonlocal count
                dst.mkdir(parents=True, exist_ok=True)
                for entry in sftp.listdir_attr(src):
                    target = confined(root, dst, entry.filename)
                    rpath = f"{src.rstrip('/')}/{entry.filename}"
                    if stat.S_ISDIR(entry.st_mode or 0):
                        walk(rpath, target)
                    elif stat.S_ISREG(entry.st_mode or 0):
                        sftp.get(rpath, str(target))
                        count += 1
            walk(remote_dir, root)
        except OSError as exc:
            raise RemoteError(f"{self.spec.where}: cannot collect {remote_dir}: {exc}") from None
        finally:
            sftp.close()
        return count


def confined(root: Path, dst: Path, name: str) -> Path:
    """dst/name, refused unless it is a plain name that stays inside root: a remote
    listing is not trusted (a server that answers '../../x', '/etc/x' or '..' for a file
    name must not write outside the target folder)."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise RemoteError(f"refusing remote file name {name!r}: not a plain file name")
    target = (dst / name).resolve()
    if not target.is_relative_to(root):
        raise RemoteError(f"refusing remote file name {name!r}: it leads outside {root}")
    return target
