"""tc counters of switch ports on every server of a cluster run, through SSH.

A fabric spread over several machines has its switch ports on all of them, and the
telemetry poller and the fidelity monitor read HTB counters by netlink, which sees one
kernel. So each other server runs `python -m testbed.datapath.tc serve` in one long-lived
SSH session (paramiko, strict host keys, as every remote command here), answering a JSON
line per request; a read asks this machine first, then each server for the names still
missing. A server that stops answering is reported once and asked again on a later read;
its ports are simply absent meanwhile (the poller and the monitor skip missing ports).
"""

from __future__ import annotations

import json
import logging
import shlex
import threading
import time
from pathlib import Path

from testbed.datapath import tc
from testbed.remote.inventory import is_local, load_hostvars, load_inventory, project_dir
from testbed.remote.ssh import HostSpec, RemoteError, RemoteHost

log = logging.getLogger("testbed.counters")
RETRY_S = 5.0  # how soon a server that failed is asked again
# the first answer waits for the server's Python to start, which takes tens of seconds in
# a software-emulated VM: with the usual timeout a slow server would never be read
FIRST_ANSWER_S = 90.0


class CounterServer:
    """One server's `tc serve` session."""

    def __init__(self, spec: HostSpec, project_dir: str, timeout_s: float = 10.0):
        self.spec, self.project_dir, self.timeout_s = spec, project_dir, timeout_s
        self._host: RemoteHost | None = None
        self._channel = None
        self._buf = b""
        self._failed_at: float | None = None
        self.errors = 0

    def _open(self) -> None:
        self._host = RemoteHost(self.spec, timeout=self.timeout_s).connect()
        channel = self._host.client.get_transport().open_session()
        python = f"{self.project_dir}/.venv/bin/python"
        channel.exec_command(f"cd {shlex.quote(self.project_dir)} && exec "
                             f"{shlex.quote(python)} -m testbed.datapath.tc serve")
        channel.settimeout(FIRST_ANSWER_S)
        self._channel, self._buf = channel, b""

    def read(self, names: list[str], include_link: bool, levels: bool) -> dict:
        """The counters of those names this server has; {} while it cannot be read."""
        if self._failed_at is not None and time.monotonic() - self._failed_at < RETRY_S:
            return {}
        try:
            if self._channel is None:
                self._open()
            ask = {"names": names, "link": include_link, "levels": levels}
            self._channel.sendall((json.dumps(ask) + "\n").encode())
            while b"\n" not in self._buf:
                chunk = self._channel.recv(1 << 16)
                if not chunk:
                    why = self._channel.recv_stderr(4096).decode(errors="replace").strip()
                    raise RemoteError(f"{self.spec.where}: counter reader exited: "
                                      f"{why[-300:] or 'no output'}")
                self._buf += chunk
            line, self._buf = self._buf.split(b"\n", 1)
            self._channel.settimeout(self.timeout_s)
            self._failed_at = None
            return json.loads(line)
        except (OSError, ValueError, RemoteError) as exc:
            self.errors += 1
            if self._failed_at is None:
                log.warning("cannot read tc counters on %s: %s", self.spec.where,
                            exc or type(exc).__name__)
            self._failed_at = time.monotonic()
            self.close()
            return {}

    def close(self) -> None:
        if self._host is not None:
            self._host.close()
        self._host, self._channel = None, None


class ClusterCounters:
    """A drop-in for tc.all_counters over every server: this machine first (its
    namespaces as `netns` says), then each other server for what is still missing."""

    def __init__(self, servers: list[CounterServer], netns: dict[str, str] | None = None):
        self.servers, self.netns = servers, netns
        self._lock = threading.Lock()  # one request at a time per SSH session

    def __call__(self, names: list[str], include_link: bool = False, levels: bool = False
                 ) -> dict[str, dict[str, dict[str, int]]]:
        out = tc.all_counters(names, include_link=include_link, levels=levels, netns=self.netns)
        with self._lock:
            for server in self.servers:
                missing = [n for n in names if n not in out]
                if not missing:
                    break
                out.update(server.read(missing, include_link, levels))
        return out

    def close(self) -> None:
        for server in self.servers:
            server.close()


def cluster_counters(inventory: str | Path) -> ClusterCounters:
    """The readers for an inventory's servers other than this machine."""
    hostvars = load_hostvars(inventory)
    specs = load_inventory(inventory)
    servers = [CounterServer(spec, project_dir(hostvars[name]))
               for name, spec in specs.items() if not is_local(name, hostvars[name])]
    return ClusterCounters(servers)
