"""Several fabrics side by side on one machine, each in its own network namespace.

A lane is one whole emulation of a sweep point: Mininet hosts and switches on its own
private OVS daemon(s), its controller with the oracle and metrics ports on the lane's own
loopback, its routers' sockets under its own state directory. A child process
(`python -m testbed.emulation.lane`) builds it inside namespace netkv-lane<k> and runs the
tasks (scheduler x seed) the parent sends it, one JSON line each, answering on a pipe
with where each run's records are. The parent deletes the namespace when the lane ends;
what a SIGKILL leaves `testbed clean` finds by name (cleanup.NETNS_RE, the lane's
processes and state directory).

How many lanes: `lane_count` (pure), from the cores, what one fabric was seen to use, and
the seeds there are to run; the orchestrator drops lanes when the fidelity monitor flags
a side-by-side run CPU- or datapath-bound.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import selectors
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from testbed.emulation import child
from testbed.emulation.child import die_with_parent
from testbed.emulation.cleanup import STATE_DIR
from testbed.emulation.net import EmulationError, choose_datapath, plan_split
from testbed.topologies.placement import lane_daemon_prefix, lane_netns

CLONE_NEWNET = 0x40000000
# what one fabric needs besides its datapath daemons: the workers (a process per
# instance, mostly idle), router, load generator and controller, as seen on 2 cores
# (benchmarks/bench_lanes.py measures it on the machine at hand)
WORKER_CORES = 1.0
# A daemon's main thread forwards every port of its switches, and switches carry unequal
# loads: on the 16-core device (the demo at dilation 1 on four daemons, three runs) the
# busiest daemon did 1.3-1.6x the even share of the 1.8-2.1 cores the four did together.
# Fabrics side by side get daemons enough that the even share stays under this, so the
# busiest stays under the monitor's "near the ceiling" (judge.THREAD_NEAR, 85%). Six
# fabrics of one daemon each there were datapath-bound in 17 of 17 runs (97-98%).
DAEMON_SHARE = 0.5
REF_RATE = 1e-4  # the packet rate (scale / dilation) the cache's forwarding work is kept at


def packet_rate(emu) -> float:
    """A fabric's packets per wall second, relative: the scale (bytes per modelled
    second, scaled) as a wall rate."""
    return emu.dilation.wall_rate(emu.scale)


def datapath_cores(threads: list[dict], emu) -> float:
    """A run's forwarding work (its daemons' main threads, busy medians from
    fidelity.json's `threads`) in cores at the packet rate REF_RATE."""
    work = sum(t["busy_median"] for t in threads
               if t["process"].startswith("ovs-vswitchd") and t["role"] == "main")
    return work * REF_RATE / packet_rate(emu)


def fabric_load(folder: Path) -> dict[str, float]:
    """What one fabric kept busy in an emulation's runs (its folder: cells/<point>/
    <scheduler>/seed<k>), for the timings cache: `datapath_cores` (datapath_cores) and
    `other_cores` (the monitor's CPU p95 x cores, less the forwarding), medians over the
    runs of points that ran on one fabric of this machine (not side by side, where each
    took a share) and whose datapath was not at its ceiling (its work would be
    understated). Empty when no run qualifies."""
    from testbed.scenario import load_scenario

    work, others = [], []
    for point in sorted((folder / "cells").glob("*/")):
        if (point / "lanes").exists() or not (point / "fabric").exists():
            continue
        try:
            emu = load_scenario(point / "scenario.yaml").emulation
        except (OSError, ValueError):  # a point it cannot read (ScenarioError) says nothing
            continue
        for run in sorted(point.glob("*/seed*/fidelity.json")):
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                fid = json.loads(run.read_text())
                busy = json.loads((run.parent / "summary.json").read_text())["cpu_busy_p95"]
                if fid.get("datapath_bound"):
                    continue
                w = datapath_cores(fid["threads"], emu)
                work.append(w)
                others.append(float(busy) * (os.cpu_count() or 1) - w * packet_rate(emu)
                              / REF_RATE)
    if not work:
        return {}
    return {"datapath_cores": statistics.median(work),
            "other_cores": max(0.0, statistics.median(others))}


def fabric_need(cell, timings: dict) -> tuple[float, int] | None:
    """(cores, OVS daemons) one fabric of `cell` needs side by side, from what a fabric
    run alone on this machine kept busy (timings: `datapath_cores`, its daemons'
    forwarding work at REF_RATE, scaled to the cell's packet rate; `other_cores`, the
    rest of what it kept busy). None when no such run was measured here: then nothing
    says how many fabrics the cores carry."""
    work = timings.get("datapath_cores")
    if not work:
        return None
    emu = cell.emulation
    work = work * packet_rate(emu) / REF_RATE
    switches = cell.cluster.spec().n_switches
    daemons = emu.ovs_instances if emu.ovs_instances != "auto" else \
        min(switches, max(1, math.ceil(work / DAEMON_SHARE)))
    return daemons + max(WORKER_CORES, timings.get("other_cores") or 0.0), daemons


def lane_daemons(cell, timings: dict, count: int) -> int | None:
    """OVS daemons for each of `count` fabrics of `cell` side by side: what its forwarding
    was measured to need (fabric_need), never more than its share of the cores less one
    for its workers; None where nothing was measured (its share of the cores decides)."""
    need = fabric_need(cell, timings)
    return None if need is None else min(need[1], max(1, lane_cores(count) - 1))


def lane_count(requested: int | str, cores: int, seeds: int, per_fabric: float | None,
               datapath: str) -> tuple[int, str]:
    """(lanes, why). `requested`: a number, or "auto": as many fabrics as the cores carry
    with a quarter of them spare, never more than the seeds to run; auto keeps one fabric
    on the kernel datapath (lanes run userspace daemons; the kernel's forwards on every
    core already) and where no fabric was measured here yet (`per_fabric` None)."""
    if requested != "auto":
        k = int(requested)
        if k < 1:
            raise ValueError(f"fabrics must be >= 1 or 'auto', got {requested}")
        return min(k, max(1, seeds)), f"{k} asked for"
    if datapath == "kernel":
        return 1, "the kernel datapath forwards on every core already"
    if per_fabric is None:
        return 1, ("no fabric measured alone on this machine yet: its run sizes fabrics "
                   "side by side next time")
    fit = math.floor(0.75 * cores / per_fabric)
    k = max(1, min(fit, seeds))
    return k, (f"{cores} cores, ~{per_fabric:.1f} per fabric, {seeds} seed(s) to run")


def plan_lanes(requested: int | str, cell, timings: dict,
               seeds: int) -> tuple[int, str, int | None]:
    """(fabrics, why, OVS daemons each) for `seeds` seeds of `cell`: lane_count from the
    cores and what a fabric needs here (fabric_need), under auto never more than fabrics
    side by side were seen to stay faithful here (timings' `lanes_ceiling`, lanes_ceiling),
    and lane_daemons for that many."""
    need = fabric_need(cell, timings)
    count, why = lane_count(requested, os.cpu_count() or 1, seeds, need[0] if need else None,
                            choose_datapath(cell.emulation.datapath))
    ceiling = int(timings.get("lanes_ceiling") or 0)
    if requested == "auto" and ceiling and count > ceiling:
        count, why = ceiling, f"{why}; at most {ceiling}: more side by side were flagged here"
    return count, why, lane_daemons(cell, timings, count)


def lanes_ceiling(folder: Path, current: float | None) -> float | None:
    """The most fabrics side by side this machine is known to keep faithful, after an
    emulation's runs (its folder): one fewer than a point ran with where any of its runs
    was CPU- or datapath-bound; as many as it ran with where none was (raising a lower
    ceiling). None: nothing ran side by side and nothing was known."""
    got = current
    for point in sorted((folder / "cells").glob("*/lanes")):
        count = len(list(point.glob("lane*")))
        flagged = False
        for run in point.parent.glob("*/seed*/fidelity.json"):
            with contextlib.suppress(OSError, ValueError):
                fid = json.loads(run.read_text())
                flagged |= bool(fid.get("cpu_bound") or fid.get("datapath_bound"))
        if flagged:
            got = max(1, min(count - 1, got or count))
        elif got:
            got = max(got, count)
    return got


def lane_cell(cell):
    """The scenario a lane runs: the cell on its own userspace daemon(s) (with
    emulation.ovs_instances "auto", as many as lane_daemons sizes, else as many as its
    share of the cores carries)."""
    data = cell.model_dump(mode="json")
    data["emulation"].update(private_ovs=True, datapath="user")
    return type(cell).model_validate(data)


def _enter_netns(path: str) -> None:
    """Child side: into the lane's network namespace (not its mount namespace: what the
    lane creates under /run/netns stays visible to `testbed clean`), dying with the parent."""
    die_with_parent()
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(fd)


def fabric_split(cell, count: int, daemons: int | None = None) -> dict:
    """The datapath split (net.plan_split's record) of a fabric of `cell` here when `count`
    run side by side (one: the cell's own), each on `daemons` (lane_cell)."""
    if count > 1:
        return plan_split(lane_cell(cell), lane_cores(count), daemons=daemons)[1]
    return plan_split(cell)[1]


def lane_cores(count: int) -> int:
    """Each of `count` fabrics' share of this machine's cores."""
    return max(1, (os.cpu_count() or 1) // count)


class Lane:
    def __init__(self, index: int, cell, workdir: Path, verbose: bool = False,
                 cores: int = 1, daemons: int | None = None):
        self.index = index
        self.cell = lane_cell(cell)
        self.daemons = daemons  # sized for its measured forwarding (lane_daemons), or None
        self.cores = cores  # its share of the machine: what an "auto" datapath split splits
        self.workdir = Path(workdir) / f"lane{index}"
        self.netns = lane_netns(index)
        self.state = STATE_DIR / f"lane{index}"
        self.proc: subprocess.Popen | None = None
        self.replies: int | None = None  # the reply pipe's read end
        self._buf = b""
        self.verbose = verbose
        self.fabric_s: float | None = None

    @property
    def log(self) -> Path:
        return self.workdir / "lane.log"

    def spawn(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.state.mkdir(parents=True, exist_ok=True)
        cell_file = self.workdir / "scenario.yaml"
        cell_file.write_text(yaml.safe_dump(self.cell.model_dump(mode="json"), sort_keys=False))
        for cmd in (["ip", "netns", "add", self.netns],
                    ["ip", "-n", self.netns, "link", "set", "lo", "up"]):
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            if done.returncode != 0:
                raise EmulationError(f"lane {self.index}: `{' '.join(cmd)}` failed: "
                                     f"{done.stderr.strip()} (testbed clean removes leftovers)")
        read, write = os.pipe()
        spec = {"cell_file": str(cell_file.resolve()), "workdir": str(self.workdir.resolve()),
                "reply_fd": write, "verbose": self.verbose, "cores": self.cores,
                "daemons": self.daemons}
        env = {**os.environ, "NETKV_STATE_DIR": str(self.state), "NETKV_LANE": str(self.index),
               "NETKV_NETNS_PREFIX": lane_daemon_prefix(self.index)}
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "testbed.emulation.lane", json.dumps(spec)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, text=True,
                env=env, pass_fds=(write,),
                preexec_fn=lambda: _enter_netns(f"/run/netns/{self.netns}"))
        os.close(write)
        self.replies = read

    def send(self, doc: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(doc) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise EmulationError(self._died()) from None

    def read(self) -> list[dict]:
        """The replies that arrived (call when the pipe is readable: it blocks otherwise)."""
        chunk = os.read(self.replies, 1 << 16)
        if not chunk:
            raise EmulationError(self._died())
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def _died(self) -> str:
        code = self.proc.poll() if self.proc else None
        try:
            lines = self.log.read_text().splitlines(True)
        except OSError:
            lines = []
        # from its last traceback's start (where the error was raised), or its last lines
        starts = [k for k, line in enumerate(lines) if line.startswith("Traceback")]
        tail = "".join(lines[starts[-1]:][-60:] if starts else lines[-12:])
        return (f"side-by-side fabric {self.index} ended (exit {code}); its log {self.log}:\n"
                + tail)

    def stop(self, timeout: float = 60.0) -> None:
        """Safe to call twice: the lane tears its fabric down, then its namespace goes."""
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()  # end of tasks: the lane stops on EOF
                try:
                    self.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    child.stop(self.proc, timeout=30)
            self.proc = None
        if self.replies is not None:
            os.close(self.replies)
            self.replies = None
        if Path(f"/run/netns/{self.netns}").exists():
            subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, timeout=30)
        shutil.rmtree(self.state, ignore_errors=True)


class LanePool:
    """K lanes of one sweep point, started together; `run(jobs)` hands each lane its
    tasks and yields (job id, reply) as runs finish, in any order."""

    def __init__(self, count: int, cell, workdir: Path, verbose: bool = False,
                 start_timeout_s: float = 300.0, first_index: int = 0,
                 daemons: int | None = None):
        share = lane_cores(count)
        self.lanes = [Lane(first_index + k, cell, workdir, verbose, share, daemons)
                      for k in range(count)]
        self.start_timeout_s = start_timeout_s

    def __enter__(self) -> LanePool:
        try:
            t = time.monotonic()
            for lane in self.lanes:
                lane.spawn()
            for lane in self.lanes:  # each builds its fabric meanwhile
                ready = self._next(lane, self.start_timeout_s)
                if "error" in ready:
                    raise EmulationError(f"side-by-side fabric {lane.index}: {ready['error']}")
                lane.fabric_s = time.monotonic() - t
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def close(self) -> None:
        for lane in self.lanes:
            if lane.proc is not None and lane.proc.poll() is None:
                with contextlib.suppress(OSError):
                    lane.proc.stdin.close()  # all lanes tear down at once
        for lane in self.lanes:
            lane.stop()

    @property
    def size(self) -> int:
        return len(self.lanes)

    def shrink(self, to: int) -> None:
        """Stop the lanes beyond the first `to`."""
        for lane in self.lanes[to:]:
            lane.stop()
        del self.lanes[to:]

    @staticmethod
    def _next(lane: Lane, timeout: float) -> dict:
        """The lane's first reply (it sends nothing else before it)."""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(lane.replies, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise EmulationError(f"side-by-side fabric {lane.index} did not answer "
                                         f"in {timeout:.0f} s; its log: {lane.log}")
                got = lane.read()
                if got:
                    return got[0]

    def run(self, jobs: dict[int, list[dict]], timeout_s: float):
        """`jobs`: lane index -> its tasks ({"id", ...} each, run in order). Yields
        (id, reply) per finished task; a lane silent for `timeout_s` ends it all."""
        sel = selectors.DefaultSelector()
        waiting = {}
        for lane in self.lanes:
            tasks = jobs.get(lane.index, [])
            for task in tasks:
                lane.send(task)
            if tasks:
                waiting[lane.index] = len(tasks)
                sel.register(lane.replies, selectors.EVENT_READ, lane)
        try:
            while waiting:
                ready = sel.select(timeout_s)
                if not ready:
                    raise EmulationError(f"no side-by-side fabric finished a run in "
                                         f"{timeout_s:.0f} s; logs under "
                                         f"{self.lanes[0].workdir.parent}")
                for key, _ in ready:
                    lane = key.data
                    for reply in lane.read():
                        yield reply.get("id"), reply
                        waiting[lane.index] -= 1
                    if not waiting[lane.index]:
                        del waiting[lane.index]
                        sel.unregister(lane.replies)
        finally:
            sel.close()
