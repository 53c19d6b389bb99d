"""The worker processes end to end without a fabric (no root): router, load generator,
prefill and decode workers as real processes on loopback addresses, a real oracle HTTP
server. What the emulation adds on top (namespaces, shaping) is tested under
tests/emulation/."""

from __future__ import annotations

import os
import queue
import secrets
import socket
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import replace

import pytest
import yaml

from testbed.cells import check_conservation
from testbed.emulation.processes import LocalLauncher, WorkerSet, local_hosts
from testbed.model.kv import kv_bytes_per_token
from testbed.scenario import load_scenario
from testbed.sdn.oracle_server import make_server, serve_in_thread
from testbed.sdn.state import ControllerState
from testbed.workers.channel import Listener, connect
from testbed.workers.config import RunConfig
from testbed.workloads.build import build_workload
from tests.conftest import TRACE
from tests.sshd import free_port

pytestmark = pytest.mark.serial  # real worker processes on loopback, timed: runs alone

SMALL = {
    "name": "local-workers",
    "workload": {"trace": str(TRACE), "profile": "rag", "load": 1.0, "warmup_s": 1,
                 "measure_s": 3},
    "cluster": {"gpus_per_server": 4, "aggs_per_pod": 2, "cores_per_agg": 1},
    "emulation": {"scale": 2e-5},
    "drain_s": 60,
}


@pytest.fixture
def oracle():
    sc = load_scenario_from(SMALL)
    server = make_server(ControllerState(sc.fabric()), "127.0.0.1", 0)
    serve_in_thread(server)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def load_scenario_from(data: dict, tmp=None):
    import tempfile
    from pathlib import Path

    folder = Path(tmp or tempfile.mkdtemp())
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_scenario(path)


def run_local(tmp_path, sc, scheduler: str, oracle: str, port_base: int) -> dict:
    """Run one scheduler's workers on loopback to the end; the router's result."""
    cfg = local_config(tmp_path, sc, scheduler, oracle, port_base + os.getpid() % 20000)
    with WorkerSet(cfg, cfg.save(tmp_path / "workers.json"), sc.cluster.spec(),
                   LocalLauncher(), tmp_path / "logs") as workers:
        return workers.wait(180)


def local_config(tmp_path, sc, scheduler: str, oracle: str, kv_port: int) -> RunConfig:
    """One run's worker config on loopback addresses (no fabric), seed 1, no dilation."""
    return RunConfig(scenario=str(tmp_path / "scenario.yaml"), scheduler=scheduler, seed=1,
                     t0=0.0, dilation=1.0, scale=sc.emulation.scale,
                     router_socket=str(tmp_path / "router.sock"), out=str(tmp_path),
                     oracle_url=oracle, kv_port=kv_port, bg_port=0,
                     hosts=local_hosts(sc.cluster.spec()))


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["netkv-full", "rr"])
def test_workers_serve_every_request_and_move_every_kv_byte(tmp_path, oracle, scheduler):
    sc = load_scenario_from(SMALL, tmp_path)
    spec = sc.cluster.spec()
    result = run_local(tmp_path, sc, scheduler, oracle, 20000)
    assert result["outcome"] == "finished", result["errors"]
    workload = build_workload(sc, 1)
    check_conservation(result["requests"], len(workload.requests))
    assert Counter(r["state"] for r in result["requests"]) == {"completed": len(workload.requests)}
    assert result["wire_bytes_sent"] == result["wire_bytes_received"] == \
        result["wire_bytes_expected"] > 0
    assert not result["wire_mismatches"] and not result["errors"]
    assert result["oracle_fetches"] >= 1 and result["intents_posted"] == len(workload.requests)

    by_request = defaultdict(list)
    for t in result["transfers"]:
        by_request[t["request"]].append(t)
    timing = sc.timing_model()
    for r in result["requests"]:
        shards = by_request[r["id"]]
        assert sorted(t["shard"] for t in shards) == list(range(spec.tp))  # one stream each
        assert {(t["src"], t["dst"], t["tier"]) for t in shards} == \
            {(r["prefill"], r["decode"], r["tier"])}  # transfers.csv agrees with decisions
        assert sum(t["bytes"] for t in shards) == pytest.approx(r["transfer_bytes"])
        busy = r["prefill_end"] - r["prefill_start"]
        assert timing.prefill_time(r["input_len"]) <= busy + 1e-6
        assert busy < timing.prefill_time(r["input_len"]) + 0.25  # real timers, small lag
        assert r["prefill_end"] <= r["transfer_start"] <= r["transfer_end"] <= r["first_token"]
        assert r["first_token"] < r["done"]


@pytest.mark.slow
@pytest.mark.parametrize("policy, state", [("always_migrate", "migrated"),
                                           ("always_recompute", "recomputed")])
def test_a_killed_decode_worker_is_detected_and_its_requests_recovered(
        tmp_path, oracle, policy, state):
    data = {**SMALL, "workload": {**SMALL["workload"], "measure_s": 4, "load": 3.0},
            "recovery": {"policy": policy, "heartbeat_s": 0.2, "missed_heartbeats": 3},
            "faults": [{"at_s": 3.0, "kind": "decode_down", "target": "i3"}]}
    sc = load_scenario_from(data, tmp_path)
    spec = sc.cluster.spec()
    assert "i3" in {i.name for i in spec.decode_pool}
    cfg = local_config(tmp_path, sc, "rr", oracle, kv_port=21000 + os.getpid() % 20000)
    with WorkerSet(cfg, cfg.save(tmp_path / "workers.json"), spec, LocalLauncher(),
                   tmp_path / "logs") as workers:
        result = workers.wait(180)
        assert "i3" not in workers.procs  # it died (SIGKILL from the router's fault)
    assert result["outcome"] == "finished", result["errors"]
    check_conservation(result["requests"], len(build_workload(sc, 1).requests))
    events = [f["event"] for f in result["faults"]]
    assert events == ["decode_down", "declared dead"]
    affected = [r for r in result["requests"] if r["recovery"]]
    assert affected and {r["state"] for r in affected} <= {state, "aborted"}
    assert all(r["decode"] != "i3" for r in affected if r["state"] == state)
    assert result["counters"]["recovery_decisions"][policy.split("_")[1]] == \
        sum(r["state"] == state for r in affected)
    served = [r for r in result["requests"] if r["state"] in ("completed", state)]
    assert all(r["first_token"] is not None for r in served)


@pytest.mark.slow
def test_kv_reuse_fetches_and_priority_marking_under_mfs(tmp_path, oracle):
    """Stage 1 on real processes: holders stream cached prefixes to prefill workers, the
    prefill waits for them, every sender marks its layers by MFS, and levels are counted."""
    data = {**SMALL, "workload": {"trace": None, "profile": "all", "load": 1.0,
                                  "warmup_s": 1, "measure_s": 3,
                                  "synthetic": {"mean_input": 4000, "documents": 4,
                                                "share_fraction": 0.9}},
            "network": {"flow_policy": "mfs"}, "reuse": {"enabled": True, "min_tokens": 256}}
    sc = load_scenario_from(data, tmp_path)
    result = run_local(tmp_path, sc, "netkv-full", oracle, 22000)
    assert result["outcome"] == "finished", result["errors"]
    workload = build_workload(sc, 1)
    check_conservation(result["requests"], len(workload.requests))
    assert Counter(r["state"] for r in result["requests"]) == {"completed": len(workload.requests)}
    reused = [r for r in result["requests"] if r["reuse_tokens"]]
    assert reused, "the workload shares prefixes: some prefill must fetch one"
    timing = sc.timing_model()
    for r in reused:  # computed only the rest, and no earlier than that
        assert r["prefill_end"] - r["prefill_start"] >= \
            timing.prefill_time(r["input_len"] - r["reuse_tokens"]) - 1e-6
    per_token = kv_bytes_per_token(sc.model_spec())
    assert result["counters"]["reuse_bytes"] == pytest.approx(per_token * sum(r["reuse_tokens"]
                                                                 for r in reused))
    levels = {int(k): v for k, v in result["counters"]["level_bytes"].items()}
    assert sum(levels.values()) == pytest.approx(
        (result["wire_bytes_sent"]) / sc.emulation.scale + result["counters"]["reuse_bytes"], rel=0.01)
    assert len(levels) > 1 and all(0 <= k <= 8 for k in levels)


@pytest.mark.slow
def test_flowkv_switches_an_idle_decode_worker_to_prefill_work(tmp_path, oracle):
    """Role switching on real processes: with slow prefill workers the router's FlowKV
    controller tells idle decode workers to take prefill work, sends them requests, and
    they decode what they prefilled in place; nothing is lost."""
    data = {**SMALL, "workload": {**SMALL["workload"], "load": 0.9, "measure_s": 5},
            "cluster": {**SMALL["cluster"], "slowdown": {"i0": 4.0}},
            "flowkv": {"cycle_s": 0.25, "window_s": 1.0, "prefill_low": 0.3}}
    sc = load_scenario_from(data, tmp_path)
    spec = sc.cluster.spec()
    result = run_local(tmp_path, sc, "flowkv", oracle, 23000)
    assert result["outcome"] == "finished", result["errors"]
    check_conservation(result["requests"], len(build_workload(sc, 1).requests))
    assert {r["state"] for r in result["requests"]} == {"completed"}
    assert result["counters"]["role_switches"] > 0
    prefill_pool = {i.name for i in spec.prefill_pool}
    hybrid = [r for r in result["requests"] if r["prefill"] not in prefill_pool]
    assert hybrid, "some request was prefilled by a switched decode worker"
    local = [r for r in hybrid if r["decode"] == r["prefill"]]
    assert local and all(r["tier"] == 0 for r in local)  # decoded in place: no transfer
    assert not result["wire_mismatches"] and not result["errors"]


@pytest.mark.slow
def test_flowkv_switches_an_idle_prefill_worker_to_decode_work(tmp_path, oracle):
    """The other direction on real processes: decode batches are full, so the router
    switches an idle prefill worker to decode work; it starts a decode engine, reports
    and beats like a decode worker (else the failure detector would declare it dead),
    and serves requests to completion."""
    data = {**SMALL, "workload": {"trace": None, "profile": "all", "load": 0.6,
                                  "warmup_s": 1, "measure_s": 4,
                                  "synthetic": {"mean_input": 2000, "mean_output": 400}},
            "cluster": {**SMALL["cluster"], "beta_max": 2},
            "flowkv": {"cycle_s": 0.25, "window_s": 1.0, "prefill_low": 0.6,
                       "decode_low": 0.1, "idle": 0.6}}
    sc = load_scenario_from(data, tmp_path)
    result = run_local(tmp_path, sc, "flowkv", oracle, 24000)
    assert result["outcome"] == "finished", result["errors"]
    check_conservation(result["requests"], len(build_workload(sc, 1).requests))
    assert {r["state"] for r in result["requests"]} == {"completed"}
    prefill_pool = {i.name for i in sc.cluster.spec().prefill_pool}
    on_prefill = [r for r in result["requests"] if r["decode"] in prefill_pool]
    assert on_prefill, "some request was decoded by a switched prefill worker"
    assert result["counters"]["role_switches"] > 0
    assert not result["wire_mismatches"] and not result["errors"]


class OverSsh(LocalLauncher):
    """Workers as a cluster run starts them on other servers: standard input held open,
    its end their signal to stop (--exit-on-eof)."""

    stdin = subprocess.PIPE

    def command(self, instance, cmd):
        return cmd if instance is None else [*cmd, "--exit-on-eof"]


@pytest.mark.slow
def test_workers_reach_the_router_over_tcp_with_its_token(tmp_path, oracle):
    sc = load_scenario_from(SMALL, tmp_path)
    cfg = replace(local_config(tmp_path, sc, "netkv-full", oracle, 20100 + os.getpid() % 20000),
                  router_socket=f"tcp:127.0.0.1:{free_port()}", control_token=secrets.token_hex(16))
    with WorkerSet(cfg, cfg.save(tmp_path / "workers.json"), sc.cluster.spec(), OverSsh(),
                   tmp_path / "logs") as workers:
        intruder = connect(cfg.router_socket, "intruder")
        intruder.send({"type": "hello", "role": "decode", "instance": "i3", "token": "guess"})
        result = workers.wait(180)
        intruder.close()
    assert result["outcome"] == "finished"
    check_conservation(result["requests"], len(build_workload(sc, 1).requests))
    assert {r["state"] for r in result["requests"]} == {"completed"}
    assert result["wire_bytes_sent"] == result["wire_bytes_expected"] > 0
    assert result["errors"] == ["refused a hello for 'i3': wrong control token"]
    assert result["clock_offsets_s"] == {}  # every worker on this machine: no correction


@pytest.mark.parametrize("end", ["session", "run"])
def test_a_worker_started_over_ssh_stops_when_its_session_ends(tmp_path, end):
    """--exit-on-eof: the SSH session's end stops the worker (SIGTERM's 143); a run that
    ends first (the router's stop) exits 0 with its session still open."""
    sc = load_scenario_from(SMALL, tmp_path)
    address = f"tcp:127.0.0.1:{free_port()}"
    cfg = replace(local_config(tmp_path, sc, "rr", "http://127.0.0.1:9", 20200),
                  router_socket=address)
    got = queue.Queue()
    listener = Listener(address, lambda c: c.read_forever(lambda c, m: got.put((c, m)),
                                                          lambda *_: None)).start()
    proc = subprocess.Popen([sys.executable, "-m", "testbed.workers", "decode",
                             str(cfg.save(tmp_path / "workers.json")), "i3", "--exit-on-eof"],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        conn, hello = got.get(timeout=60)  # connected, waiting for a start that never comes
        assert hello["instance"] == "i3" and hello["machine"] == socket.gethostname()
        while hello["type"] != "hello":
            conn, hello = got.get(timeout=60)
        conn.send({"type": "clock", "sent": 12.5})  # it answers a clock probe with its clock
        answer = {}
        while answer.get("type") != "clock":
            _, answer = got.get(timeout=60)
        assert answer["sent"] == 12.5 and answer["instance"] == "i3"
        assert abs(answer["wall"] - time.time()) < 60
        if end == "session":
            proc.stdin.close()
            assert proc.wait(timeout=30) == 143, proc.stderr.read()
        else:
            conn.send({"type": "stop"})
            assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        proc.kill()
        listener.close()


def test_the_router_starts_another_machines_worker_on_that_machines_clock(tmp_path, oracle):
    """A worker on another machine has its clock measured by round trips before the
    start (the fastest of CLOCK_PROBES counts), and gets t0 on its own clock."""
    from testbed.workers.realtime import CLOCK_PROBES
    from testbed.workers.router.service import Router

    sc = load_scenario_from(SMALL, tmp_path)
    cfg = local_config(tmp_path, sc, "rr", oracle, 20300)
    router = Router(cfg)

    class Sent:
        def __init__(self, name):
            self.name, self.got = name, []

        def send(self, msg):
            self.got.append(msg)

    conns = {}
    for name in sorted(router.expected_workers):
        conns[name] = Sent("?")
        away = name == "i3"
        router._dispatch(conns[name], {
            "type": "hello", "role": "x", "instance": name, "token": None,
            "machine": "elsewhere" if away else socket.gethostname()})
    assert all(c.got == [] for n, c in conns.items() if n != "i3")  # no start yet
    delays = [0.4, 0.05, *[0.2] * (CLOCK_PROBES - 2)]  # round trips; the second is fastest
    for delay in delays:
        (probe,) = [m for m in conns["i3"].got if m["type"] == "clock"][-1:]
        # i3's clock is 7.5 s ahead; its answer reads it `delay` after the probe was sent,
        # and the answer is back at once: an asymmetric delay, so the estimate errs by
        # delay / 2, and the fastest probe errs least
        router._dispatch(conns["i3"], {"type": "clock", "instance": "i3",
                                       "sent": probe["sent"] - delay,
                                       "wall": probe["sent"] + 7.5})
    router._stop.set()
    assert set(router.clock_offsets) == set(router.clock_rtt) == {"i3"}
    assert router.clock_rtt["i3"] == pytest.approx(0.05, abs=0.04)
    assert router.clock_offsets["i3"] == pytest.approx(7.5 + 0.05 / 2, abs=0.03)
    starts = {name: c.got[-1]["t0"] for name, c in conns.items()}
    assert starts["i3"] - starts["i0"] == pytest.approx(router.clock_offsets["i3"])
    assert len(set(starts.values()) - {starts["i3"]}) == 1  # the rest share the router's t0
