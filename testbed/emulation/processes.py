"""Start one run's worker processes, wait for the router's verdict, stop them all.

The router and the load generator run in the root namespace (they talk HTTP to the
controller on loopback); each prefill/decode worker runs inside its emulated host's
network namespace (nsenter --net=/proc/<host pid>/ns/net), so its KV streams leave
through the host's veth into the fabric. Every child gets SIGTERM if this process
dies (PR_SET_PDEATHSIG), and `stop` terminates, then kills, whatever is still alive.
A LocalLauncher runs the same processes without namespaces on 127.0.0.0/8 addresses:
the control plane and byte accounting can then be tested without root.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from testbed.emulation.child import die_with_parent
from testbed.records import FULL_BELOW, free_bytes
from testbed.workers.channel import listening, tcp_address
from testbed.workers.config import RunConfig

ROUTER_STOP_S = 5.0  # for the router to write what finished before it is killed


class WorkerError(RuntimeError):
    """A run's workers could not start or finish; the message says which and why."""


class LocalLauncher:
    """Workers as plain processes; instance hosts must be loopback addresses."""

    stdin = subprocess.DEVNULL

    def prepare(self, files: list[Path]) -> None:
        """Make the run's files readable wherever workers start (here: they are)."""

    def command(self, instance: str | None, cmd: list[str]) -> list[str]:
        return cmd


class NamespaceLauncher(LocalLauncher):
    """Workers inside Mininet hosts: the host shell's network namespace."""

    def __init__(self, network):
        self.network = network

    def command(self, instance: str | None, cmd: list[str]) -> list[str]:
        if instance is None:
            return cmd
        pid = self.network.host(instance).pid
        return ["nsenter", f"--net=/proc/{pid}/ns/net", "--", *cmd]


def local_hosts(spec) -> dict[str, str]:
    """127.0.1.x addresses for a LocalLauncher run: one per instance, all local."""
    return {inst.name: f"127.0.{1 + k // 250}.{1 + k % 250}"
            for k, inst in enumerate(spec.instances)}


class WorkerSet:
    def __init__(self, cfg: RunConfig, cfg_path: Path, spec, launcher, logdir: Path):
        self.cfg, self.cfg_path, self.spec = cfg, cfg_path, spec
        self.launcher = launcher
        self.logdir = logdir
        self.procs: dict[str, subprocess.Popen] = {}

    def _spawn(self, name: str, role: str, instance: str | None) -> None:
        cmd = [sys.executable, "-m", "testbed.workers", role, str(self.cfg_path)]
        if instance is not None and role in ("prefill", "decode"):
            cmd.append(instance)
        log = (self.logdir / f"{name}.log").open("w")
        self.procs[name] = subprocess.Popen(
            self.launcher.command(instance if role in ("prefill", "decode") else None, cmd),
            stdout=log, stderr=subprocess.STDOUT, stdin=self.launcher.stdin,
            preexec_fn=die_with_parent)
        log.close()

    def start(self) -> WorkerSet:
        """Spawn everything; on any failure or signal here, stop what was spawned (a
        `with` block does not call __exit__ when __enter__ raises)."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> WorkerSet:
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.launcher.prepare([self.cfg_path, Path(self.cfg.scenario)])
        self._unlink_socket()
        self._spawn("router", "router", None)
        deadline = time.monotonic() + 60
        while not listening(self.cfg.router_socket):
            if self.procs["router"].poll() is not None:
                raise WorkerError(f"the router exited at start:\n{self.tail('router')}")
            if time.monotonic() > deadline:
                raise WorkerError("the router did not open its control socket within 60 s")
            time.sleep(0.05)
        self._spawn("loadgen", "loadgen", None)
        for inst in self.spec.prefill_pool:
            self._spawn(inst.name, "prefill", inst.name)
        for inst in self.spec.decode_pool:
            self._spawn(inst.name, "decode", inst.name)
        return self

    def tail(self, name: str, lines: int = 12) -> str:
        try:
            return "".join((self.logdir / f"{name}.log").read_text().splitlines(True)[-lines:])
        except OSError:
            return ""

    def _fault_targets(self) -> set[str]:
        if not hasattr(self, "_targets"):
            scenario = self.cfg.load_scenario()
            self._targets = {f.target for f in scenario.faults if f.kind == "decode_down"}
        return self._targets

    def wait(self, timeout_s: float, on_tick: Callable[[], None] | None = None) -> dict:
        """Block until the router exits; return its result (router.json)."""
        router = self.procs["router"]
        deadline = time.monotonic() + timeout_s
        while router.poll() is None:
            if time.monotonic() > deadline:
                raise WorkerError(f"the run did not finish within {timeout_s:.0f} s")
            dead = [n for n, p in self.procs.items()
                    if n not in ("router", "loadgen") and p.poll() not in (None, 0)]
            for n in dead:  # the router fails their requests; tell the user why they died
                code = self.procs.pop(n).returncode
                if code == -signal.SIGKILL and n in self._fault_targets():
                    continue  # the scenario's decode_down fault: recovery's business
                print(f"worker {n} died (exit {code}):\n{self.tail(n)}", file=sys.stderr)
            if on_tick:
                on_tick()
            time.sleep(0.2)
        out = Path(self.cfg.out) / "router.json"
        if not out.exists():
            if free_bytes(out.parent) < FULL_BELOW:
                raise WorkerError(f"the results disk is full at {out.parent} (no space left "
                                  "on device): the router could not write its records; what "
                                  "had finished is in its journal.jsonl there")
            code = router.returncode
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
            tail = self.tail("router").strip()
            raise WorkerError(f"the router died ({how}) without writing its result; its log: "
                              f"{self.logdir / 'router.log'}" + (f"\n{tail}" if tail else ""))
        return json.loads(out.read_text())

    def stop(self) -> None:
        """The router first, given a moment to write what finished so far (router.json),
        then every worker; SIGKILL for any still up after 5 s."""
        router = self.procs.get("router")
        if router is not None and router.poll() is None:
            router.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                router.wait(timeout=ROUTER_STOP_S)
        alive = [p for p in self.procs.values() if p.poll() is None]
        for p in alive:
            p.terminate()
        deadline = time.monotonic() + 5
        for p in alive:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        self._unlink_socket()

    def _unlink_socket(self) -> None:
        if tcp_address(self.cfg.router_socket) is None:
            Path(self.cfg.router_socket).unlink(missing_ok=True)

    def __enter__(self) -> WorkerSet:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
