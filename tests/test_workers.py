"""Worker protocol and KV byte streams, on loopback (no root needed)."""

import re
import socket
import struct
import threading

import pytest

from testbed.model.kv import MODEL_PRESETS, kv_shard_bytes
from testbed.topologies.replica import scaled_bytes
from testbed.topologies.traffic_classes import KV
from testbed.workers import kvstream, protocol

pytestmark = pytest.mark.serial  # real sockets paced and timed: runs alone


def reader(data: bytes):
    view = memoryview(data)
    pos = [0]

    def recv(n):
        chunk = view[pos[0]:pos[0] + n].tobytes()
        pos[0] += len(chunk)
        return chunk

    return recv


def test_control_messages_round_trip_and_stream_in_sequence():
    a = {"type": "decision", "request": "r1", "decode": "i7", "tier": 2, "bytes": 10,
         "host": "10.0.0.8", "port": 7000, "wire": [1, 1, 1, 1], "deadline": 4.2,
         "bandwidth": 3.1e9}
    b = {"type": "first_token", "request": "r1", "time": 3.5}
    recv = reader(protocol.encode(a) + protocol.encode(b))
    assert protocol.read_message(recv) == a
    assert protocol.read_message(recv) == b
    assert protocol.read_message(recv) is None  # clean end


@pytest.mark.parametrize("msg, text", [
    ({"type": "teleport"}, "unknown message type 'teleport'"),
    ({"type": "kv_done", "request": "r"}, "lacks field(s) decode, bytes, start, end"),
    ([1, 2], "must be a JSON object"),
])
def test_bad_messages_name_the_problem(msg, text):
    with pytest.raises(protocol.ProtocolError, match=re.escape(text)):
        protocol.encode(msg)


def test_truncated_and_garbled_streams():
    whole = protocol.encode({"type": "heartbeat", "instance": "i4", "time": 1.0})
    with pytest.raises(protocol.ProtocolError, match="ended after"):
        protocol.read_message(reader(whole[:-3]))
    with pytest.raises(protocol.ProtocolError, match="not JSON"):
        protocol.read_message(reader(struct.pack("!I", 3) + b"{x}"))
    with pytest.raises(protocol.ProtocolError, match="exceeds"):
        protocol.read_message(reader(struct.pack("!I", 1 << 30)))


def test_kv_header_round_trip_and_errors():
    head = protocol.read_kv_header(reader(protocol.kv_header("r9", 2, 4, 12345)))
    assert head == {"request": "r9", "shard": 2, "shards": 4, "bytes": 12345}
    with pytest.raises(protocol.ProtocolError, match="not a KV stream"):
        protocol.read_kv_header(reader(b"HTTP/1.1 200"))
    with pytest.raises(protocol.ProtocolError, match="bad shard"):
        protocol.kv_header("r", 4, 4, 10)


def test_scaled_bytes_follow_the_shard_size():
    shard = kv_shard_bytes(MODEL_PRESETS["llama-3-70b"], 16384, 4)  # 1.25 GiB
    assert scaled_bytes(shard, 2e-4) == round(shard * 2e-4)
    assert scaled_bytes(0, 2e-4) == 0 and scaled_bytes(10, 1e-9) == 1


def test_kv_sockets_carry_the_af41_tos():
    with kvstream.kv_socket() as sock:
        assert sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) == KV.tos == 0x88


def test_a_transfer_lands_byte_exact_on_loopback():
    landed, errors = [], []
    done = threading.Event()

    def on_shard(result):
        landed.append(result)
        if len(landed) == 3:
            done.set()

    rx = kvstream.KVReceiver("127.0.0.1", 0, on_shard,
                             lambda why, _rid: errors.append(why)).start()
    try:
        sizes = [3 * 2**20 + 7, 0, 512 * 1024]
        sent = kvstream.send_transfer("127.0.0.1", rx.port, "r42", sizes)
        assert done.wait(10), errors
    finally:
        rx.close()
    assert [r.bytes for r in sent] == sizes
    assert sorted((r.shard, r.bytes) for r in landed) == [(0, sizes[0]), (1, 0), (2, sizes[2])]
    assert all(r.request == "r42" and r.shards == 3 and r.end >= r.start for r in landed)
    assert not errors


def test_a_short_stream_is_reported_not_counted():
    landed, errors = [], []
    got_error = threading.Event()
    rx = kvstream.KVReceiver("127.0.0.1", 0, landed.append,
                             lambda m, rid: (errors.append((m, rid)), got_error.set())).start()
    try:
        with socket.create_connection(("127.0.0.1", rx.port)) as sock:
            sock.sendall(protocol.kv_header("r1", 0, 1, 1000) + b"x" * 10)
            sock.shutdown(socket.SHUT_WR)
            assert sock.recv(1) == b""  # no acknowledgement for a short shard
        assert got_error.wait(5)
    finally:
        rx.close()
    assert not landed and "990 bytes missing" in errors[0][0] and errors[0][1] == "r1"


def test_a_marked_shard_is_sent_layer_by_layer_and_promoted_between_layers():
    """Levels change only at layer boundaries, the bytes per level add up, and a paced
    shard takes at least size / rate."""
    import time

    landed = []
    rx = kvstream.KVReceiver("127.0.0.1", 0, landed.append).start()
    asked = []

    def decide(sent, total):
        asked.append(sent)
        return (7 if sent < total // 2 else 0), None

    try:
        marking = kvstream.Marking(decide, levels=8, layers=10)
        r = kvstream.send_shard("127.0.0.1", rx.port, "r7", 0, 1, 100_000, marking=marking)
        paced = kvstream.Marking(lambda s, t: (3, 200_000.0), levels=8, layers=4)
        t0 = time.monotonic()
        kvstream.send_shard("127.0.0.1", rx.port, "r8", 0, 1, 100_000, marking=paced)
        took = time.monotonic() - t0
    finally:
        rx.close()
    assert asked == [0] + [k * 10_000 for k in range(10)]  # the SYN's level, then per layer
    assert r.level_bytes == {7: 50_000, 0: 50_000}
    assert took >= 100_000 / 200_000 * 0.75  # the last layer's sleep may end early


# -- real-time loop, clock, channels -------------------------------------------------------
def test_run_clock_converts_between_wall_and_modelled_time_with_dilation():
    from testbed.clock import RunClock

    clock = RunClock(t0=1000.0, dilation=2.0)
    assert clock.wall(3.0) == 1006.0
    assert clock.to_modelled(1006.0) == 3.0


def test_real_time_loop_runs_due_timers_in_time_order_and_posted_jobs():
    import threading
    import time

    from testbed.clock import RunClock
    from testbed.workers.realtime import RealTimeLoop

    loop = RealTimeLoop(RunClock(time.time(), 1.0))
    seen = []
    loop.at(loop.now + 0.03, lambda: seen.append("late"))
    loop.at(loop.now + 0.01, lambda: seen.append("early"))
    loop.at(loop.now + 0.05, loop.stop)
    threading.Thread(target=lambda: loop.post(lambda: seen.append("posted"))).start()
    loop.run()
    assert seen.index("early") < seen.index("late")
    assert "posted" in seen


def test_channel_carries_framed_messages_both_ways():
    import socket
    import threading

    from testbed.workers.channel import Connection

    a, b = socket.socketpair()
    left, right = Connection(a, "left"), Connection(b, "right")
    got, closed = [], threading.Event()
    right.read_forever(lambda _c, m: got.append(m), lambda _c, _why: closed.set())
    left.send({"type": "start", "t0": 5.0})
    left.send({"type": "stop"})
    left.close()
    assert closed.wait(5)
    assert got == [{"type": "start", "t0": 5.0}, {"type": "stop"}]


# -- the router's mirror of a decode cache ------------------------------------------------------
def test_block_index_built_from_a_caches_journal_gives_the_same_prefix_hits():
    import random

    from testbed.model.cache import BlockIndex, PrefixCache, block_keys

    rng = random.Random(3)
    cache = PrefixCache(16, 1.0)
    cache.record_changes()
    mirror = BlockIndex(16)
    requests = []
    for _ in range(200):
        ids = [rng.randrange(40) for _ in range(rng.randrange(1, 6))]
        length = rng.randrange(16, 512 * len(ids) + 1)
        n = len(block_keys(ids, length, 16))
        cache.pin(ids, n)
        cache.unpin(ids, n)
        cache.evict_to(rng.randrange(50, 400))
        requests.append((ids, length))
        if rng.random() < 0.3:
            mirror.update(*cache.drain_changes())
    mirror.update(*cache.drain_changes())
    assert len(mirror) == len(cache)
    for ids, length in requests:
        assert mirror.prefix_hit_tokens(ids, length) == cache.prefix_hit_tokens(ids, length)


def test_router_view_counts_its_own_decisions_until_a_report_reflects_them():
    from testbed.model.cache import BlockIndex
    from testbed.workers.router.service import DecodeView
    from testbed.workloads.requests import Request

    view = DecodeView(BlockIndex(16))
    view.apply({"free_memory": 100.0, "queued": 0, "batch": 2, "seq": 0})
    view.seq = 1
    view.pending[1] = 30.0  # decided, not yet reported back
    cand = view.candidate("i4", Request("r", 0.0, 32, 1, (7,)))
    assert (cand.free_memory, cand.queued, cand.batch) == (70.0, 1, 2)
    view.apply({"free_memory": 60.0, "queued": 1, "batch": 2, "seq": 1})  # the decode saw it
    cand = view.candidate("i4", Request("r", 0.0, 32, 1, (7,)))
    assert (cand.free_memory, cand.queued) == (60.0, 1)


def test_a_stalled_marked_send_asks_for_its_level_again_before_the_layer_ends():
    """A starved flow must still be promoted: the sender re-asks every recheck_s."""
    import time

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    asked = []

    def reader():
        conn, _ = server.accept()
        time.sleep(0.6)  # the receiver does not read: the sender's window closes
        while conn.recv(1 << 16):
            pass
        conn.sendall(b"\x01")
        conn.close()

    t = threading.Thread(target=reader)
    t.start()
    marking = kvstream.Marking(lambda sent, total: (asked.append(sent) or 7, None), 8, 2,
                               recheck_s=0.05)
    kvstream.send_shard("127.0.0.1", server.getsockname()[1], "r9", 0, 1, 4_000_000,
                        marking=marking)
    t.join(10)
    server.close()
    assert len(asked) > 3  # more than the SYN's and the two layers' questions
    assert any(s not in (0, 2_000_000) for s in asked)  # ... asked mid-layer, while stalled


def test_a_shard_sent_as_framed_calls_lands_byte_exact():
    landed, both = [], threading.Event()

    def on_shard(result):
        landed.append(result)
        if len(landed) == 2:
            both.set()

    rx = kvstream.KVReceiver("127.0.0.1", 0, on_shard).start()
    try:
        r = kvstream.send_shard("127.0.0.1", rx.port, "r5", 0, 1, 100_003, calls=37)
        one = kvstream.send_shard("127.0.0.1", rx.port, "r6", 0, 1, 100_003)
        assert both.wait(5)
    finally:
        rx.close()
    assert r.bytes == one.bytes == 100_003
    assert sorted(x.bytes for x in landed) == [100_003, 100_003]
    with pytest.raises(protocol.ProtocolError):
        protocol.kv_header("r", 0, 1, 10, calls=0)
