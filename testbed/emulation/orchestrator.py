"""`testbed emulate`: a scenario's cells on packets, in the shared run-record format.

Per sweep point the fabric is built once (controller, Mininet, HTB); on it every
scheduler x seed runs with fresh workers (fresh caches, queues, in-flight counters), a
fresh fidelity monitor, and records in cells/<point>/<scheduler>/seed<k>/ exactly as
the flow simulator writes them, plus fidelity.json and the worker logs. Everything is
torn down on every path out; an interrupted run leaves a folder marked PARTIAL.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from testbed.cells import RunOutcome, check_conservation, preflight, run_cells, slug
from testbed.clock import RunClock
from testbed.emulation.capture import Capture
from testbed.emulation.cleanup import STATE_DIR
from testbed.emulation.fidelity import FidelityMonitor
from testbed.emulation.hooks import RunHooks
from testbed.emulation.ingress import machine_drops
from testbed.emulation.judge import departure_summary, describe_departures
from testbed.emulation.lanes import LanePool, lane_cell, lane_cores, plan_lanes
from testbed.emulation.net import EmulatedNetwork, EmulationError, choose_datapath, describe_split
from testbed.emulation.net import preflight as net_preflight
from testbed.emulation.processes import WorkerError, WorkerSet
from testbed.emulation.readback import ReadbackError, applied_replica
from testbed.emulation.servers import ServerPool, unpack
from testbed.metrics import aggregate, describe_stalls, run_summary, tcp_stalls
from testbed.records import (
    FULL_BELOW,
    PACKET_RUN_MIN_FREE,
    REQUEST_FIELDS,
    SENDER_FIELDS,
    TRANSFER_FIELDS,
    atomic_write,
    check_room,
    free_bytes,
    interruption,
    write_csv,
    write_json,
)
from testbed.topologies.traffic_classes import kv_ports
from testbed.workers import journal, lateness
from testbed.workers.config import RunConfig
from testbed.workloads.build import build_workload

KV_PORT_BG_OFFSET = 1  # background sinks listen on kv_port + 1 (best-effort class)


@dataclass
class Progress:
    """What the CLI shows while a run goes on."""

    label: str = ""
    run_s: float = 0.0  # expected modelled duration of the current run
    started: float = 0.0  # wall clock


def run_timeout_s(cell) -> float:
    """How long one run may take, wall clock: the workers' start, its whole window, the
    drain limit."""
    wl = cell.workload
    return (cell.emulation.dilation.wall(wl.warmup_s + wl.measure_s + cell.drain_s)
            + cell.emulation.start_timeout_s)


class LiveWatch:
    """Hands the router's live.json (oracle congestion per tier, transfers in flight,
    requests ended) to `on_live` about once a second while a run goes on."""

    def __init__(self, path: Path, on_live: Callable[[dict], None], period_s: float = 1.0):
        self.path = path
        self.on_live = on_live
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="live")

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_exc):
        self._stop.set()
        self._thread.join(timeout=5)
        return False

    def _watch(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                doc = json.loads(self.path.read_text())
            except (OSError, ValueError):
                continue  # not written yet, or mid-replace
            self.on_live(doc)


def run_one(network: EmulatedNetwork, cell, key: str, seed: int, rundir: Path, tag: str,
            on_live: Callable[[dict], None] | None = None) -> tuple[dict, list[dict], dict]:
    """One scheduler x seed on a fabric that is up: router result, link rows, fidelity;
    `on_live(doc)` gets the router's live view while it runs. The workers read the
    fabric's scenario file (its datapath split resolved)."""
    emu = cell.emulation
    fabric = network.fabric
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    rundir = rundir.resolve()  # absolute: a cluster run copies files to the same paths
    cfg = RunConfig(
        scenario=str(network.scenario_file.resolve()), scheduler=key, seed=seed, t0=0.0,
        dilation=emu.time_dilation, scale=emu.scale,
        router_socket=network.control_address(tag), out=str(rundir),
        oracle_url=network.base_url, kv_port=emu.kv_port,
        bg_port=emu.kv_port + KV_PORT_BG_OFFSET,
        hosts={name: h.ip for name, h in fabric.hosts.items()},
        controller_pid=network.controller.pid if network.controller else None,
        control_token=secrets.token_hex(16))
    rundir.mkdir(parents=True, exist_ok=True)
    lateness.clear(rundir)
    cfg_path = cfg.save(rundir / "workers.json")
    os.chmod(cfg_path, 0o600)  # it holds the control token
    monitor = FidelityMonitor(fabric, min_queue_packets=emu.queue_min_packets,
                              datapath=network.datapath, netns=network.interface_netns,
                              read=network.read_counters,
                              trace_path=rundir / "departures.trace").start()
    capture = Capture(fabric, emu.capture, rundir / "capture", network.interface_netns,
                      emu.capture_snaplen)
    result = None
    try:
        with capture, WorkerSet(cfg, cfg_path, fabric.spec, network.launcher(),
                                rundir / "logs") as workers:
            monitor.workers = lambda: {n: p.pid for n, p in list(workers.procs.items())}
            with LiveWatch(rundir / "live.json", on_live or (lambda _doc: None)):
                restarts = len(network.restarts)
                result = workers.wait(run_timeout_s(cell), on_tick=_fabric_check(network))
    finally:
        fidelity = monitor.stop(timers=lateness.read(rundir),
                                pushes=lateness.push_waits(result["transfers"]) if result else None)
    fidelity["warnings"] += network.restarts[restarts:]
    try:  # what ns-3's twin of this run must build (validate/engines/ns3_replay.py checks it)
        fidelity["replica"] = applied_replica(network)
    except (OSError, ValueError, KeyError, StopIteration, ReadbackError) as exc:
        fidelity["replica"] = None
        fidelity["warnings"].append(f"the applied replica could not be read back: {exc}")
    if result["outcome"] != "finished":
        raise WorkerError(f"{key} seed {seed}: {result['outcome']}; logs in {rundir / 'logs'}")
    t0 = result["t0"]
    wl = cell.workload
    modelled = RunClock(t0, emu.time_dilation).to_modelled
    capture.summarise(modelled, kv_ports(emu.kv_port, emu.kv_transport),
                      emu.kv_port + KV_PORT_BG_OFFSET)
    links = monitor.link_rows(modelled,
                              lambda t: wl.warmup_s <= t - 0.5 and t <= wl.warmup_s + wl.measure_s)
    return result, links, fidelity


def _fabric_check(network) -> Callable[[], None]:
    """Raises once the fabric lost a part nobody will bring back (an OVS daemon, a host):
    the run would only wait out its drain limit."""
    def check() -> None:
        if why := network.lost():
            raise WorkerError(why)
    return check


def run_task(network: EmulatedNetwork, cell, key: str, seed: int, rundir: Path, tag: str,
             workload, on_live: Callable[[dict], None] | None = None) -> tuple[dict, dict]:
    """One scheduler x seed, checked and summarised: its records (a run_cells result) and
    its fidelity verdict. A run that ends early keeps what finished (keep_what_finished)."""
    try:
        result, links, fidelity = run_one(network, cell, key, seed, rundir, tag, on_live)
    except BaseException as exc:
        kept = keep_what_finished(rundir, workload, interruption(exc))
        if isinstance(exc, WorkerError | OSError) and free_bytes(rundir) < FULL_BELOW:
            raise WorkerError(
                f"the results disk is full at {rundir} (no space left on device): the run "
                "stopped there; " + ("what had finished is in its requests.csv" if kept else
                                     "what had finished is in its journal.jsonl")) from exc
        raise
    check_conservation(result["requests"], len(workload.requests))
    summary = run_summary(result["requests"], links, workload, result["decision_us"],
                          result["counters"])
    summary.update(packet_counters(result, fidelity))
    verdict = {"verdict": fidelity["verdict"], "reasons": fidelity["reasons"],
               "warnings": fidelity["warnings"], "advice": fidelity["advice"],
               "tcp": tcp_stalls(result["transfers"]),
               "departures": departure_summary(fidelity),
               "oracle": oracle_health(result, cell.recovery.oracle_max_age_s),
               "datapath": network.split}
    return {"requests": result["requests"], "transfers": result["transfers"], "links": links,
            "summary": summary, "files": {"fidelity.json": fidelity}}, verdict


def keep_what_finished(rundir: Path, workload, cause: str) -> bool:
    """After a run ended early (a fault, a signal, over time): the router's records up to
    then (router.json, written as it stopped; its journal if it died without one) as the
    cell's requests.csv and transfers.csv, and a summary.json whose `partial` names the
    cause; in-flight requests keep an empty state (the journal has ended ones only). False
    when the router left nothing to keep."""
    try:
        result = json.loads((rundir / "router.json").read_text())
        requests, transfers = result["requests"], result["transfers"]
    except (OSError, ValueError, KeyError, TypeError):
        journaled = journal.read(rundir)  # the router died: what it had journaled
        if not journaled or not journaled[0]:
            return False
        requests = list({r["id"]: r for r in journaled[0]}.values())
        transfers, result = journaled[1], {"outcome": "router gone; from its journal"}
    summary = run_summary(requests, [], workload, result.get("decision_us", []),
                          result.get("counters", {}))
    summary.update(partial=cause, outcome=result.get("outcome"),
                   ended=sum(bool(r.get("state")) for r in requests))
    tcp = SENDER_FIELDS if any("retrans_segs" in t for t in transfers) else []
    try:
        write_csv(rundir / "requests.csv", requests, REQUEST_FIELDS)
        write_csv(rundir / "transfers.csv", transfers, TRANSFER_FIELDS + tcp)
        write_json(rundir / "summary.json", summary)
    except OSError:  # a full disk: the journal, if any, is what is left
        return False
    return True


def run_emulation(scenario, out_root: Path, hooks: RunHooks | None = None, *,
                  verbose: bool = False, network: Callable[..., EmulatedNetwork] = EmulatedNetwork,
                  fabrics: int | str = 1, timings: dict | None = None,
                  dask: str | None = None) -> RunOutcome:
    """Emulate every cell through the shared cell loop (cells.run_cells); what the caller
    hears and decides goes through `hooks`.

    `network(cell, cell_file, workdir, quiet=)` builds each point's fabric (a
    ClusterNetwork partial spreads it over several machines). `fabrics`: how many fabrics
    a point's seeds run on side by side (lanes.py), or "auto" (lanes.lane_count, from the
    cores and what one fabric run alone here was measured to keep busy: `timings`,
    validate's cache; each fabric side by side gets the OVS daemons its forwarding needs,
    lanes.fabric_need). `dask`: a Dask scheduler's address; each point's seeds then run
    on the servers whose workers offer a fabric (servers.py), a seed per server at a time,
    and this machine needs a fabric only for `hooks.on_fabric`."""
    hooks = hooks or RunHooks()
    preflight(scenario)
    check_room(out_root, PACKET_RUN_MIN_FREE, "a packet-level run")
    for _, point_scenario in scenario.points():  # root, OVS, free ports, no leftovers: before any file
        if dask is None or hooks.on_fabric is not None:
            net_preflight(point_scenario)
            choose_datapath(point_scenario.emulation.datapath)
    verdicts: list[dict] = []
    pool = ServerPool(dask) if dask else None

    def execute(tasks, root: Path):
        """Per sweep point: its fabric up once, then its tasks in order (seed by seed)."""
        for index, (point, point_scenario) in enumerate(scenario.points()):
            mine = [t for t in tasks if t.index == index]
            celldir = root / "cells" / f"{index:03d}-{slug(point)}"
            cell_file = celldir / "scenario.yaml"
            atomic_write(cell_file, yaml.safe_dump(point_scenario.model_dump(mode="json"),
                                                   sort_keys=False))
            seeds = sorted({t.seed for t in mine})
            if pool is not None:
                if hooks.on_fabric is not None:
                    with EmulatedNetwork(point_scenario, cell_file, celldir / "setup",
                                         quiet=not verbose) as net:
                        hooks.fabric(net, celldir)
                yield from on_servers(pool, index, point, point_scenario, mine, root, hooks, verdicts)
                continue
            count, why, daemons = plan_lanes(fabrics, point_scenario, timings or {}, len(seeds))
            if count > 1 and network is not EmulatedNetwork:
                raise ValueError("a fabric over a cluster runs one at a time: fabrics=1")
            if fabrics != 1:
                hooks.note(f"{slug(point)}: {count} fabric(s) side by side ({why})")
            hooks.step(f"{slug(point)}: building the fabric"
                       + (f"s ({count} side by side)" if count > 1 else ""))
            if count > 1:
                if hooks.on_fabric is not None:  # its own fabric, as the lanes build theirs
                    _setup_fabric(point_scenario, celldir, verbose, count, daemons, hooks)
                yield from on_lanes(count, index, point, point_scenario, mine, root, celldir, verbose,
                                    hooks, verdicts, daemons)
                continue
            with network(point_scenario, cell_file, celldir / "fabric", quiet=not verbose) as net:
                hooks.fabric(net, celldir)
                yield from on_one_fabric(net, index, point, point_scenario, mine, root, hooks, verdicts)

    def all_faithful() -> bool:
        return all(v["verdict"] == "faithful" for v in verdicts)

    try:
        outcome, folder = run_cells(
            scenario, out_root, "emulation", execute, "packet-level emulation",
            aggregate_fn=aggregate_numeric,
            epilogue=lambda: ({"all_faithful": all_faithful()},
                              "\n" + fidelity_lines(verdicts)))
    finally:
        if pool is not None:
            pool.close()
    write_json(folder.path / "fidelity.json", {"all_faithful": all_faithful(), "runs": verdicts})
    folder.finish()
    return outcome


def _setup_fabric(cell, celldir: Path, verbose: bool, count: int, daemons: int | None,
                  hooks: RunHooks) -> None:
    """A fabric of the lanes' kind for `hooks.on_fabric` alone (validate calibrates there)."""
    setup = lane_cell(cell)
    setup_file = celldir / "setup" / "scenario.yaml"
    atomic_write(setup_file, yaml.safe_dump(setup.model_dump(mode="json"), sort_keys=False))
    with EmulatedNetwork(setup, setup_file, celldir / "setup", quiet=not verbose,
                         cores=lane_cores(count), daemons=daemons) as net:
        hooks.fabric(net, celldir)


def on_one_fabric(net: EmulatedNetwork, index: int, point, cell, mine: list, root: Path,
                  hooks: RunHooks, verdicts: list[dict]):
    """A point's tasks on its one fabric, seed by seed; after each seed's schedulers the
    look decides whether to go on."""
    built: tuple[int, object] | None = None  # (seed, its workload)
    for task in mine:
        if built is not None and built[0] != task.seed \
                and not hooks.go_on(index, [built[0]], root):
            return
        if built is None or built[0] != task.seed:
            built = (task.seed, build_workload(cell, task.seed))
        wl = cell.workload
        hooks.step(f"{slug(point)} {task.scheduler} seed {task.seed}",
                   cell.emulation.dilation.wall(wl.warmup_s + wl.measure_s))
        records, verdict = run_task(net, cell, task.scheduler, task.seed, root / task.rel,
                                    f"{index}-{task.scheduler}-{task.seed}", built[1],
                                    hooks.on_live)
        verdicts.append({"cell": task.rel, **verdict})
        yield task, records
    if built is not None:  # every seed ran: the last look is still taken (and recorded)
        hooks.go_on(index, [built[0]], root)


def on_lanes(count: int, index: int, point, cell, mine: list, root: Path, celldir: Path,
             verbose: bool, hooks: RunHooks, verdicts: list[dict], daemons: int | None = None):
    """A point's seeds on `count` fabrics side by side: each round gives every lane one
    seed (all its schedulers, in order); after a round the look decides whether to go on,
    and a round with a run flagged CPU- or datapath-bound costs a lane."""
    by_seed: dict[int, list] = {}
    for task in mine:
        by_seed.setdefault(task.seed, []).append(task)
    pending = sorted(by_seed)
    wl = cell.workload
    run_wall = cell.emulation.dilation.wall(wl.warmup_s + wl.measure_s)
    with LanePool(count, cell, celldir / "lanes", verbose,
                  start_timeout_s=300.0 + cell.emulation.start_timeout_s,
                  daemons=daemons) as pool:
        while pending:
            batch, pending = pending[:pool.size], pending[pool.size:]
            jobs, tasks, n = {}, {}, 0
            for lane, seed in zip(pool.lanes, batch, strict=False):
                for task in by_seed[seed]:
                    tasks[n] = task
                    jobs.setdefault(lane.index, []).append(
                        {"id": n, "scheduler": task.scheduler, "seed": seed,
                         "rundir": str((root / task.rel).resolve()),
                         "tag": f"{index}-{task.scheduler}-{seed}"})
                    n += 1
            hooks.step(f"{slug(point)} seeds {', '.join(map(str, batch))} on "
                       f"{len(batch)} fabrics", run_wall)
            bound = False
            longest = max(len(v) for v in jobs.values())
            for job, reply in pool.run(jobs, longest * (run_timeout_s(cell) + 60.0)):
                if job is None or "error" in reply:
                    raise (WorkerError if reply.get("kind") else EmulationError)(
                        f"side-by-side fabric: {reply.get('error')}")
                path = Path(reply["path"])
                doc = json.loads(path.read_text())
                path.unlink()
                task = tasks[job]
                verdicts.append({"cell": task.rel, **doc["verdict"]})
                fid = doc["records"]["files"]["fidelity.json"]
                bound |= bool(fid.get("cpu_bound") or fid.get("datapath_bound"))
                yield task, doc["records"]
            if not hooks.go_on(index, batch, root):
                break
            if bound and pool.size > 1 and pending:
                pool.shrink(pool.size - 1)
                hooks.note(f"{slug(point)}: a run side by side was CPU- or datapath-bound: "
                           f"{pool.size} fabric(s) from here")


def on_servers(pool: ServerPool, index: int, point, cell, mine: list, root: Path,
               hooks: RunHooks, verdicts: list[dict]):
    """A point's seeds on the servers: each round gives every server one seed (all its
    schedulers, on the server's own fabric); after a round the look decides whether to go
    on. The servers are counted again each round: one that joined takes a seed, one that
    left is not waited for (with none left, one is, for the pool's alone_s)."""
    by_seed: dict[int, list] = {}
    for task in mine:
        by_seed.setdefault(task.seed, []).append(task)
    pending = sorted(by_seed)
    wl = cell.workload
    while pending:
        names = pool.wait_for_servers(pool.alone_s)
        batch, pending = pending[:len(names)], pending[len(names):]
        hooks.note(f"{slug(point)}: seed(s) {', '.join(map(str, batch))} on "
                   f"{len(names)} server(s): {', '.join(names)}")
        hooks.step(f"{slug(point)} seeds {', '.join(map(str, batch))} on "
                   f"{len(batch)} server(s)",
                   cell.emulation.dilation.wall(wl.warmup_s + wl.measure_s))
        jobs, tasks, n = [], {}, 0
        for seed in batch:
            runs = []
            for task in by_seed[seed]:
                tasks[n] = task
                runs.append({"id": n, "scheduler": task.scheduler, "rel": task.rel,
                             "tag": f"{index}-{task.scheduler}-{seed}"})
                n += 1
            jobs.append({"seed": seed, "runs": runs,
                         "timeout_s": len(runs) * (run_timeout_s(cell) + 60.0)})
        for job, answer in pool.run(cell, jobs, 600.0 + max(j["timeout_s"] for j in jobs)):
            for rel, blob in answer["runs"].items():
                unpack(blob, root / rel)
            for run in job["runs"]:
                doc = answer["results"][run["id"]]
                task = tasks[run["id"]]
                verdicts.append({"cell": task.rel, "server": answer["server"],
                                 **doc["verdict"]})
                yield task, doc["records"]
        if not hooks.go_on(index, batch, root):
            break


def packet_counters(result: dict, fidelity: dict) -> dict:
    """What summary.json adds for an emulated run: bytes on the wire, oracle, fidelity."""
    return {
        "wire_bytes_sent": result["wire_bytes_sent"],
        "wire_bytes_received": result["wire_bytes_received"],
        "wire_bytes_expected": result["wire_bytes_expected"],
        "wire_mismatches": len(result["wire_mismatches"]),
        "oracle_fetches": result["oracle_fetches"], "oracle_errors": result["oracle_errors"],
        "intents_posted": result["intents_posted"],
        "fidelity": fidelity["verdict"], "cpu_busy_p95": fidelity["cpu_busy_p95"],
        "worst_link_ratio": fidelity["worst_ratio"],
        "departures_late_share": (departure_summary(fidelity) or {}).get("worst_late_share"),
        "datapath_bound": fidelity["datapath_bound"],
        "datapath_thread_busy": (fidelity["datapath_thread"] or {}).get("busy_median"),
        "machine_drops": machine_drops(fidelity.get("ingress")),
        "worker_errors": len(result["errors"]),
        "oracle_age_max_s": result["oracle_age_max_s"],
        **{f"tcp_{k}": v for k, v in tcp_stalls(result["transfers"]).items()
           if k != "timeouts_known"},
    }


def oracle_health(result: dict, limit_s: float) -> str | None:
    """A line when the oracle went stale during the run (the controller or its HTTP
    server down or stopped): the switches kept forwarding, decisions went blind."""
    errors, age = result["oracle_errors"], result["oracle_age_max_s"] or 0.0
    stale = result["counters"].get("stale_oracle_decisions", 0)
    if not errors and age <= limit_s:
        return None
    return (f"went stale: {errors} of {result['oracle_fetches'] + errors} fetches failed, the "
            f"oldest oracle was {age:.1f} s old (limit {limit_s:g} s); {stale} decision(s) "
            "used the tier map alone (no congestion). Was the controller down? Its log is "
            "in the fabric folder")


def aggregate_numeric(summaries: list[dict]) -> dict:
    """Seeds' mean/std like the flow simulator's rows; the verdict: worst of the seeds."""
    out = aggregate(summaries)
    out["fidelity"] = ("faithful" if all(s["fidelity"] == "faithful" for s in summaries)
                       else "unfaithful")
    return out


def fidelity_lines(verdicts: list[dict]) -> str:
    lines = ["## Fidelity", ""]
    for v in verdicts:
        why = "; ".join(v["reasons"]) or "saturated links at rate, CPU ok"
        lines.append(f"- `{v['cell']}`: **{v['verdict']}** ({why})")
        lines += [f"  - warning: {w}" for w in v.get("warnings", [])]
        lines += [f"  - advice: {a}" for a in v.get("advice", [])]
        if v.get("departures"):
            lines.append(f"  - packets: {describe_departures(v['departures'])}")
        if v.get("tcp"):
            lines.append(f"  - TCP: {describe_stalls(v['tcp'])}")
        if v.get("oracle"):
            lines.append(f"  - oracle: {v['oracle']}")
        if v.get("datapath"):
            lines.append(f"  - {describe_split(v['datapath'])}")
    return "\n".join(lines) + "\n"
