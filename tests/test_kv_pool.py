"""Kept KV connections (emulation.kv_connections: persistent): transfers reuse their
senders' connections, each shard still lands and is acknowledged alone, and a receiver
that went away is noticed before a kept connection is trusted again."""

import json
import socket
import threading
import time

import pytest

from testbed.workers import kvstream, protocol, tcpinfo

pytestmark = pytest.mark.serial  # real KV connections kept and closed: runs alone


class Landed:
    """A receiver's shards, with a wait for the n-th."""

    def __init__(self):
        self.shards, self.errors = [], []
        self._cond = threading.Condition()

    def on_shard(self, result):
        with self._cond:
            self.shards.append(result)
            self._cond.notify_all()

    def on_error(self, why, _rid):
        self.errors.append(why)

    def wait(self, n: int) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.shards) >= n, timeout=10)


def _connections(rx_port: int, pool: kvstream.ConnectionPool) -> set[tuple]:
    """The local ends of the pool's idle connections to the receiver."""
    return {s.getsockname() for socks in pool._idle.values() for s in socks
            if s.getpeername()[1] == rx_port}


def test_transfers_on_a_pool_reuse_one_connection_per_shard_and_each_lands():
    got = Landed()
    rx = kvstream.KVReceiver("127.0.0.1", 0, got.on_shard, got.on_error).start()
    pool = kvstream.ConnectionPool()
    try:
        sizes = [300_007, 0, 65_536]
        kvstream.send_transfer("127.0.0.1", rx.port, "r1", sizes, pool=pool)
        first = _connections(rx.port, pool)
        # no FIN pushes a kept shard's last partial segment: Nagle must not hold it
        assert all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
                   for socks in pool._idle.values() for s in socks)
        kvstream.send_transfer("127.0.0.1", rx.port, "r2", sizes, pool=pool)
        assert got.wait(6), got.errors
        second = _connections(rx.port, pool)
    finally:
        pool.close()
        rx.close()
    assert len(first) == 3 and second == first  # the same three connections, kept
    assert sorted((r.request, r.shard, r.bytes) for r in got.shards) == sorted(
        (rid, k, n) for rid in ("r1", "r2") for k, n in enumerate(sizes))
    assert not got.errors


def test_the_modes_keep_their_own_connections_and_framed_calls_land_on_a_kept_one():
    got = Landed()
    rx = kvstream.KVReceiver("127.0.0.1", 0, got.on_shard, got.on_error).start()
    pool = kvstream.ConnectionPool()
    try:
        for rid, calls in (("a", 1), ("b", 7), ("c", 1), ("d", 7)):
            r = kvstream.send_shard("127.0.0.1", rx.port, rid, 0, 1, 10_001, calls=calls,
                                    pool=pool)
            assert r.bytes == 10_001
        assert got.wait(4), got.errors
        assert len(_connections(rx.port, pool)) == 2  # one plain, one with framed calls
    finally:
        pool.close()
        rx.close()
    assert not got.errors


def test_a_kept_connection_whose_receiver_went_away_is_replaced_not_used():
    """The receiver's end closes after one shard (its process restarted): the next shard
    goes on a new connection, not into the closed one."""
    server = socket.create_server(("127.0.0.1", 0))
    heads = []

    def receiver():
        for _ in range(2):  # each connection: one shard, acknowledged, then closed
            conn, _ = server.accept()
            with conn:
                head = protocol.read_kv_header(conn.recv)
                protocol.read_exact(conn.recv, head["bytes"])
                heads.append(head)
                conn.sendall(b"\x01")

    thread = threading.Thread(target=receiver, daemon=True)
    thread.start()
    pool = kvstream.ConnectionPool()
    port = server.getsockname()[1]
    try:
        kvstream.send_shard("127.0.0.1", port, "before", 0, 1, 1000, pool=pool)
        (kept,) = [s for socks in pool._idle.values() for s in socks]
        deadline = time.monotonic() + 5
        while kvstream.alive(kept) and time.monotonic() < deadline:
            time.sleep(0.01)  # the receiver's FIN is on its way
        r = kvstream.send_shard("127.0.0.1", port, "after", 0, 1, 1000, pool=pool)
        thread.join(5)
    finally:
        pool.close()
        server.close()
    assert r.bytes == 1000 and [h["request"] for h in heads] == ["before", "after"]
    assert all(h.get("keep") for h in heads)


def test_a_kept_connection_reports_tcp_stalls_per_shard_not_since_it_opened():
    pool = kvstream.ConnectionPool()

    class Sock:
        def fileno(self):
            return 7

    sock = Sock()
    first = {"retrans_segs": 5, "timeouts": 1, "timeout_s": 0.2, "rtt_s": 0.01}
    second = {"retrans_segs": 8, "timeouts": 1, "timeout_s": 0.2, "rtt_s": 0.02}
    assert pool.stalls(sock, first) == first
    assert pool.stalls(sock, second) == {"retrans_segs": 3, "timeouts": 0, "timeout_s": 0.0,
                                         "rtt_s": 0.02}
    assert set(tcpinfo.RECORDED) <= set(first)


def test_a_kept_connection_closed_between_shards_ends_quietly_and_bad_bytes_still_fail():
    got = Landed()
    rx = kvstream.KVReceiver("127.0.0.1", 0, got.on_shard, got.on_error).start()
    pool = kvstream.ConnectionPool()
    try:
        kvstream.send_shard("127.0.0.1", rx.port, "x", 0, 1, 100, pool=pool)
        assert got.wait(1)
        pool.close()  # the sender leaves: a clean end between shards, not an error
        with socket.create_connection(("127.0.0.1", rx.port)) as bad:
            bad.sendall(protocol.kv_header("y", 0, 1, 10, keep=True) + b"z" * 10 + b"junk")
            assert bad.recv(1) == b"\x01"  # the shard itself landed
            bad.recv(1)  # then the junk is refused: the receiver closes
    finally:
        rx.close()
    assert [x.request for x in got.shards] == ["x", "y"]
    assert len(got.errors) == 1 and "magic" in got.errors[0]


def test_keep_open_leaves_n_connections_a_shard_and_tops_up_what_the_pool_holds():
    got = Landed()
    rx = kvstream.KVReceiver("127.0.0.1", 0, got.on_shard, got.on_error).start()
    pool = kvstream.ConnectionPool()
    try:
        pool.keep_open("127.0.0.1", rx.port, 2, 3)
        three = _connections(rx.port, pool)
        pool.keep_open("127.0.0.1", rx.port, 2, 4)  # one more a shard, not four
        four = _connections(rx.port, pool)
        assert got.wait(6 + 8), got.errors
    finally:
        pool.close()
        rx.close()
    assert len(three) == 6 and len(four) == 8 and three < four
    assert all(r.bytes == 1 and r.request == "warm" for r in got.shards)


def test_the_calibrations_probes_keep_their_connections_warm_before_timing(capsys):
    from testbed.workers import probe

    got = Landed()
    rx = kvstream.KVReceiver("127.0.0.1", 0, got.on_shard, got.on_error)
    accepted = []  # one per connection opened
    rx._serve = lambda conn: accepted.append(1) or kvstream.KVReceiver._serve(rx, conn)
    rx.start()
    try:
        assert probe.main(["--keep", "send", "127.0.0.1", str(rx.port), "2", "cubic",
                           "10000", "30000"]) == 0
        assert probe.main(["--keep", "compete", "127.0.0.1", str(rx.port), "2", "cubic",
                           "20000", "3"]) == 0
        assert got.wait(2 + 4 + 6 + 6), got.errors  # warm-ups and timed, 2 shards each
    finally:
        rx.close()
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["bytes"] for x in lines] == [10000, 30000, 20000]
    assert len(lines[2]["seconds"]) == 3
    timed = [r for r in got.shards if not r.request.startswith("warm")]
    assert len(timed) == 2 + 2 + 6
    # each probe process opened its warm-up's connections and timed only on those
    assert len(accepted) == 2 + 6
