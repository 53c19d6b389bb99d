"""TCP_INFO of connections a library opened inside this process (the Transfer Engine's):
found by their descriptors, and what they did since the last look attributed to a row."""

from __future__ import annotations

import socket

from testbed.workers import engine_tcp


def info(segs, retrans, rtt, timeouts=0, timeout_s=0.0):
    return {"data_segs_out": segs, "retrans_segs": retrans, "timeouts": timeouts,
            "timeout_s": timeout_s, "rtt_s": rtt, "min_rtt_s": rtt / 2}


def test_counters_are_summed_since_the_last_look_and_round_trips_are_the_busiest_s():
    a, b = ("l", 1), ("l", 2)
    first = {a: info(100, 3, 0.010), b: info(10, 0, 0.002)}
    assert engine_tcp.combine({}, first) == {"retrans_segs": 3, "timeouts": 0,
                                             "timeout_s": 0.0, "rtt_s": 0.010,
                                             "min_rtt_s": 0.005, "data_segs_out": 110,
                                             "busy_s": None, "rwnd_limited_s": None,
                                             "sndbuf_limited_s": None}
    later = {a: info(110, 3, 0.010), b: info(60, 2, 0.004, 1, 0.2)}
    got = engine_tcp.combine(first, later)
    assert got["retrans_segs"] == 2 and got["timeouts"] == 1 and got["timeout_s"] == 0.2
    assert got["rtt_s"] == 0.004  # b sent 50 segments since, a 10
    # the same addresses with fewer segments sent: a new connection, counted from zero
    assert engine_tcp.combine(later, {b: info(5, 1, 0.003)})["retrans_segs"] == 1
    assert engine_tcp.combine(first, {}) is None  # nothing open: unknown, not zero


def test_an_older_kernel_s_missing_counter_stays_unknown():
    old = {k: v for k, v in info(5, 0, 0.001).items()} | {"timeouts": None}
    got = engine_tcp.combine({}, {("l", 1): old})
    assert got["timeouts"] is None and got["retrans_segs"] == 0


def test_this_process_s_connections_to_a_target_port_are_found_by_descriptor():
    server = socket.create_server(("127.0.0.1", 0))
    other = socket.create_server(("127.0.0.1", 0))
    port, other_port = server.getsockname()[1], other.getsockname()[1]
    with server, other, socket.create_connection(("127.0.0.1", port)) as client, \
            socket.create_connection(("127.0.0.1", other_port)):
        peer, _ = server.accept()
        with peer:
            client.sendall(b"x" * 100_000)
            got = engine_tcp.connections("127.0.0.1", [port])
            assert list(got) == [(client.getsockname(), ("127.0.0.1", port))]
            (one,) = got.values()
            assert one["data_segs_out"] > 0 and one["min_rtt_s"] is not None
            stalls = engine_tcp.EngineStalls()
            first = stalls.look("127.0.0.1", [port])["retrans_segs"]
            # a first look is the connection's count so far, read between the two reads
            # (loopback under load may resend a probe: the count need not be 0)
            (after,) = engine_tcp.connections("127.0.0.1", [port]).values()
            assert one["retrans_segs"] <= first <= after["retrans_segs"]
            assert engine_tcp.connections("127.0.0.2", [port]) == {}
