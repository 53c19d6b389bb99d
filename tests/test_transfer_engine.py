"""Mooncake's Transfer Engine as the emulation's KV transport: what is refused before a
run, how its traffic is classified, and shards moved between two engines on loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from click.testing import CliRunner

from testbed.cli import main
from testbed.datapath import tc
from testbed.scenario import ScenarioError, load_scenario
from testbed.topologies.traffic_classes import (
    ENGINE_LANES,
    engine_notice,
    engine_ports,
    kv_ports,
)
from testbed.workers import engine_tcp, transfer_engine
from testbed.workers.protocol import validate
from tests.conftest import ROOT

VALIDATE = ROOT / "scenarios" / "validate.yaml"
MOONCAKE = {"emulation.kv_transport": "mooncake"}


def tell(sender, host: str, port: int, note: dict) -> None:
    """A notice as the workers send it."""
    sender.send(host, port, note["request"], engine_notice(**note))


def need_engine() -> None:
    """Skipped with the reason where the wheel is missing; under CI, failed."""
    if not transfer_engine.installed():
        why = f"Mooncake's Transfer Engine ({transfer_engine.WHEEL}) is not installed"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run this test but {why}", pytrace=False)
        pytest.skip(why)


@pytest.mark.parametrize(("over", "field"), [
    ({"network.flow_policy": "mfs"}, "network.flow_policy"),
    ({"emulation.layer_chunks": True}, "emulation.layer_chunks"),
    ({"reuse.enabled": True}, "reuse.enabled"),
    ({"network.transfer_mode": "block"}, "network.transfer_mode"),
    ({"schedulers": ["flowkv"]}, "schedulers"),
    ({"emulation.kv_port": 40000}, "emulation.kv_port"),
])
def test_what_the_engine_cannot_carry_is_refused_naming_the_field(over, field):
    with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
        load_scenario(VALIDATE, {**MOONCAKE, **over})
    load_scenario(VALIDATE, over)  # the pusher carries each of them


def test_a_mooncake_emulation_is_refused_without_the_wheel_here_or_on_a_server(
        monkeypatch, tmp_path):
    from testbed.remote.modules import servers_lacking

    sc = load_scenario(VALIDATE, MOONCAKE)
    with pytest.raises(ScenarioError, match=r"cannot be imported on vm2 \(No module"):
        transfer_engine.engine_available(sc, {"vm2": "No module named 'mooncake'"})
    # a cluster's servers are asked over SSH; this machine is not, an unreachable one is
    # named with why (a closed port on loopback: nothing leaves this machine)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    inv = tmp_path / "cluster.yml"
    inv.write_text("all:\n  hosts:\n    localhost: {ansible_connection: local}\n"
                   f"    node2: {{ansible_host: 127.0.0.1, ansible_port: {closed}}}\n")
    lacking = servers_lacking(inv, "mooncake.engine")
    assert list(lacking) == ["node2"] and "unreachable" in lacking["node2"], lacking
    monkeypatch.setattr(transfer_engine, "installed", lambda: False)
    with pytest.raises(ScenarioError, match=transfer_engine.WHEEL):
        transfer_engine.engine_available(sc)
    transfer_engine.engine_available(load_scenario(VALIDATE))  # the pusher needs neither


def test_the_cli_refuses_before_anything_starts_with_exit_2(tmp_path):
    result = CliRunner().invoke(main, ["emulate", str(VALIDATE), "--out", str(tmp_path),
                                       "--set", "emulation.kv_transport=mooncake",
                                       "--set", "reuse.enabled=true"])
    assert result.exit_code == 2, result.output
    assert "reuse.enabled with emulation.kv_transport mooncake" in result.output
    assert not list(tmp_path.iterdir())


def test_the_engine_ports_are_kv_on_host_nics_in_either_direction():
    ports = engine_ports(7000)
    assert len(set(ports)) == len(ports) > 2 and 7000 not in ports
    assert set(ports) < set(kv_ports(7000, "mooncake")) and kv_ports(7000, "pusher") == (7000,)
    sport, dport = tc._port_keys(7017)  # u32 keys: source port high half, destination low
    assert sport == "0x1b690000/0xffff0000+20" and dport == "0x00001b69/0x0000ffff+20"
    env = transfer_engine.engine_env(7000, persistent=False)
    assert (int(env["MC_MIN_RPC_PORT"]), int(env["MC_MAX_RPC_PORT"])) == (ports[0], ports[-1])
    assert env["MC_TCP_ENABLE_CONNECTION_POOL"] == "0" and env["MC_FORCE_TCP"] == "1"
    validate({"type": "kv_endpoint", "instance": "i4", "session": "10.0.0.5:7017",
              "addr": 1, "capacity": 2, "notice": 7000})


def test_the_engine_s_deadlines_are_its_defaults_in_modelled_time():
    """At dilation 2 a deployment's 30 s without progress are 60 wall seconds; a
    fractional stretch rounds up (a deadline is never shortened)."""
    deadlines = ("MC_TCP_PROGRESS_TIMEOUT_SEC", "MC_TCP_STATUS_TIMEOUT_SEC",
                 "MC_TRANSFER_TIMEOUT")
    assert [transfer_engine.engine_env(7000, True)[k] for k in deadlines] == ["30"] * 3
    assert [transfer_engine.engine_env(7000, True, 2)[k] for k in deadlines] == ["60"] * 3
    assert transfer_engine.engine_env(7000, True, 1.01)["MC_TCP_PROGRESS_TIMEOUT_SEC"] == "31"


RECEIVER = """
import json, sys, time
from testbed.workers.transfer_engine import KVEngine, EngineReceiver
engine = KVEngine("127.0.0.1", int(sys.argv[1]), True, capacity=1 << 20)
got = []
EngineReceiver(engine, got.append, lambda why, rid: None).start()
print(json.dumps(engine.endpoint()), flush=True)
t = time.time()
while len(got) < 2 and time.time() - t < 30:
    time.sleep(0.01)
print(json.dumps([[g.request, g.shard, g.shards, g.bytes, g.stage, g.end >= g.start]
                  for g in sorted(got, key=lambda g: g.shard)]), flush=True)
"""


@pytest.mark.serial
def test_shards_written_through_two_engines_land_and_their_receiver_hears_of_each():
    need_engine()
    base = 20000 + os.getpid() % 5000  # two engines, each its own block of ports
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, str(base + 100)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        endpoint = json.loads(receiver.stdout.readline())
        assert int(endpoint["session"].split(":")[1]) in engine_ports(base + 100)
        sender = transfer_engine.KVEngine("127.0.0.1", base, True, capacity=1 << 20)
        sizes = [3 * (1 << 20) + 5, 1000]  # the first larger than either buffer: in pieces
        results = sender.send_transfer(endpoint, "r1", sizes)
        assert [(r.shard, r.bytes, r.shards) for r in results] == [(0, sizes[0], 2),
                                                                    (1, 1000, 2)]
        assert all(r.end > r.start for r in results)
        # the engine's own connections' TCP_INFO, read from this process's descriptors
        tcp = [r.tcp for r in results]
        assert all(t is not None and t["retrans_segs"] >= 0 for t in tcp), tcp
        assert tcp[0]["min_rtt_s"] > 0
        heard = json.loads(receiver.stdout.readline())
        assert heard == [["r1", 0, 2, sizes[0], "p2d", True], ["r1", 1, 2, 1000, "p2d", True]]
        # a write outside the registered buffer, and an engine nobody runs: named errors
        with pytest.raises(transfer_engine.EngineError, match=r"r2/0: .*" + endpoint["session"]):
            sender.send_transfer({**endpoint, "addr": 12345}, "r2", [10])
        with pytest.raises(transfer_engine.EngineError, match="127.0.0.1:1 failed"):
            sender.send_transfer({**endpoint, "session": "127.0.0.1:1"}, "r3", [10])
    finally:
        receiver.kill()
        receiver.wait()


@pytest.mark.serial
def test_the_engine_carries_a_target_s_shards_on_its_lanes_and_opens_no_more():
    # the lanes ns-3 and the flow model keep (ENGINE_LANES): eight writes at once to one
    # target leave that many connections to it, kept for the next transfer
    need_engine()
    base = 30000 + os.getpid() % 2000
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, str(base + 100)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        endpoint = json.loads(receiver.stdout.readline())
        sender = transfer_engine.KVEngine("127.0.0.1", base, True, capacity=1 << 20)
        for rid in ("r1", "r2"):  # each in pieces of the receiver's 1 MiB buffer
            results = sender.send_transfer(endpoint, rid, [3_000_000] * 8)
            assert sorted(r.shard for r in results) == list(range(8))
        kept = engine_tcp.connections("127.0.0.1", engine_ports(base + 100))
        assert len(kept) == ENGINE_LANES, kept
    finally:
        receiver.kill()
        receiver.wait()


@pytest.mark.serial
def test_the_calibration_probes_time_transfers_through_the_engine():
    need_engine()
    base = 25000 + os.getpid() % 5000
    probe = [sys.executable, "-m", "testbed.workers.probe", "--keep", "--engine"]
    receiver = subprocess.Popen([*probe, "listen", "recv", "127.0.0.1", str(base)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ready, _, endpoint = receiver.stdout.readline().strip().partition(" ")
        assert ready == "ready" and json.loads(endpoint)["capacity"] > 0
        sent = subprocess.run([*probe, endpoint, "send", "127.0.0.1", str(base + 100), "4",
                               "cubic", "100000", "300001"], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert sent.returncode == 0, sent.stderr[-2000:]
        lines = [json.loads(x) for x in sent.stdout.splitlines()]
        assert [d["bytes"] for d in lines] == [100000, 300001]
        assert all(d["seconds"] == pytest.approx(max(d["shards"])) and len(d["shards"]) == 4
                   for d in lines)
    finally:
        receiver.terminate()
        receiver.wait(timeout=10)
    # the receiver heard of every shard of the warm-up and of both transfers
    landed = [json.loads(x) for x in receiver.stdout.read().splitlines()]
    assert sorted(d["bytes"] for d in landed if d["request"].startswith("probe")) == sorted(
        [25000] * 4 + [75001] + [75000] * 3)


def test_a_notice_lands_its_shards_on_a_kept_connection_and_a_lost_one_is_named():
    """The side channel alone, on loopback (no engine): one connection per target kept
    across notices and opened again once when the target closed it; a line that is not
    a notice is said and skipped; a target nobody listens on fails the transfer by name."""
    import threading
    from types import SimpleNamespace

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    heard, got, errors = threading.Semaphore(0), [], []

    def listen():
        return transfer_engine.EngineReceiver(
            SimpleNamespace(host="127.0.0.1", kv_port=port),
            lambda r: (got.append(r), heard.release()),
            lambda why, rid: errors.append(why)).start()

    receiver, sender = listen(), transfer_engine.NoticeSender()
    try:
        note = {"request": "r1", "stage": "p2d", "start": 1.0, "shards": [[0, 10], [1, 12]]}
        tell(sender, "127.0.0.1", port, note)
        assert heard.acquire(timeout=5) and heard.acquire(timeout=5)
        assert [(r.request, r.shard, r.shards, r.bytes, r.start) for r in got] == [
            ("r1", 0, 2, 10, 1.0), ("r1", 1, 2, 12, 1.0)]
        kept = sender._socks[("127.0.0.1", port)]
        kept.sendall(b"not json\n")
        tell(sender, "127.0.0.1", port, {**note, "request": "r2", "shards": [[0, 5]]})
        assert heard.acquire(timeout=5) and got[-1].request == "r2"
        assert sender._socks[("127.0.0.1", port)] is kept  # one connection, kept
        assert len(errors) == 1 and "unreadable notice from 127.0.0.1" in errors[0]
        receiver.close()
        kept.close()  # as a target that restarted would leave it
        receiver = listen()
        tell(sender, "127.0.0.1", port, {**note, "request": "r3", "shards": [[0, 7]]})
        assert heard.acquire(timeout=5) and got[-1].request == "r3"
        receiver.close()
        # a target that closed the kept connection while it was idle: the next notice
        # would go into it unseen; it goes on a new connection
        with socket.create_server(("127.0.0.1", 0)) as plain:
            plain.settimeout(5)
            where = plain.getsockname()
            for rid in ("r5", "r6"):
                tell(sender, *where, {**note, "request": rid})
                conn, _ = plain.accept()
                with conn, conn.makefile("rb") as lines:
                    assert json.loads(lines.readline())["request"] == rid
        sender.close()
        with pytest.raises(transfer_engine.EngineError,
                           match=f"r4: the notice to 127.0.0.1:{port} failed"):
            tell(sender, "127.0.0.1", port, {**note, "request": "r4"})
    finally:
        receiver.close()
        sender.close()


def test_a_transfer_s_first_write_to_a_target_goes_alone_then_its_shards_together():
    """The first write to a session makes the engine handshake with it; shards arriving
    there at once were refused. The others wait for it, then write side by side."""
    import threading
    from types import SimpleNamespace

    lock, active, seen = threading.Lock(), [0], []
    second_wave = threading.Barrier(3, timeout=5)  # the other three shards, at once

    def wait(batch):
        with lock:
            active[0] += 1
            seen.append(active[0])
            first = len(seen) == 1
        if first:  # while it is on its way, no other shard may write
            threading.Event().wait(0.3)
        else:
            second_wave.wait()
        with lock:
            active[0] -= 1
        return 1

    engine = object.__new__(transfer_engine.KVEngine)
    engine.te = SimpleNamespace(transfer_submit_write=lambda *a: 7)
    engine.completions = SimpleNamespace(wait=wait)
    engine.buffer, engine.capacity = 0, 1 << 20
    engine._met, engine._meeting, engine._lock = set(), {}, threading.Lock()
    engine.notices = SimpleNamespace(send=lambda *a: None)
    engine.stalls = SimpleNamespace(look=lambda *a: None)
    results = engine.send_transfer({"session": "10.0.0.2:7017", "addr": 1, "capacity": 1 << 20,
                                    "notice": 7000}, "r1", [10, 10, 10, 10])
    assert len(results) == 4 and seen[0] == 1 and max(seen) == 3  # alone, then three
    assert engine._met == {"10.0.0.2:7017"}


@pytest.mark.parametrize("says, ok", [("ready {\"session\": \"x\"}", True), ("oops", False)])
def test_a_probe_receiver_s_log_before_its_ready_line_is_kept_apart(tmp_path, says, ok):
    """The engine logs to stderr before its receiver is ready: the ready line is still
    found; a receiver that says anything else is stopped (not waited on forever) and
    its log quoted."""
    import tempfile

    from testbed.validate.engines.fabric_probes import await_ready

    script = ("import sys, time; print('WARNING: Logging before InitGoogleLogging()', "
              f"file=sys.stderr, flush=True); print({says!r}, flush=True); time.sleep(60)")
    with tempfile.TemporaryFile(mode="w+") as log:
        recv = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                stderr=log, text=True)
        try:
            if ok:
                assert json.loads(await_ready(recv, log, "i3")) == {"session": "x"}
            else:
                with pytest.raises(RuntimeError, match="receiver in i3 failed: oops\n"
                                                       "WARNING: Logging before"):
                    await_ready(recv, log, "i3")
                assert recv.poll() is not None
        finally:
            recv.kill()
            recv.wait()
