"""The sender's TCP_INFO, read per KV connection: parsed at struct tcp_info's offsets,
missing fields on older kernels, and a run's stalls counted."""

import socket
import struct

from testbed.metrics import describe_stalls, tcp_stalls
from testbed.workers import tcpinfo


def _struct(length: int = 280, **values) -> bytes:
    buf = bytearray(length)
    for name, raw in values.items():
        offset, fmt, _ = tcpinfo.FIELDS[name]
        if offset + struct.calcsize(fmt) <= length:
            struct.pack_into("<" + fmt, buf, offset, raw)
    return bytes(buf)


def test_fields_come_out_in_si_units():
    got = tcpinfo.parse(_struct(retrans_segs=7, min_rtt_s=1500, timeouts=2, timeout_s=420,
                                busy_s=2_000_000))
    assert got["retrans_segs"] == 7 and got["timeouts"] == 2
    assert got["min_rtt_s"] == 1500e-6 and got["timeout_s"] == 0.42 and got["busy_s"] == 2.0


def test_a_kernel_before_6_7_has_no_timeout_count():
    got = tcpinfo.parse(_struct(232, retrans_segs=3, timeouts=5))
    assert got["retrans_segs"] == 3 and got["timeouts"] is None and got["timeout_s"] is None


def test_a_real_connection_reports_itself():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    conn, _ = server.accept()
    with server, client, conn:
        client.sendall(b"x" * 200_000)
        got = 0
        while got < 200_000:
            got += len(conn.recv(65536))
        info = tcpinfo.read(client)
    assert info is not None
    assert info["data_segs_out"] >= 1 and info["retrans_segs"] == 0  # loopback loses nothing
    assert info["min_rtt_s"] is not None and 0 < info["min_rtt_s"] < 1.0


def test_a_runs_stalls_are_counted_per_connection():
    rows = [{"retrans_segs": 0, "timeouts": 0, "timeout_s": 0.0},
            {"retrans_segs": 4, "timeouts": 0, "timeout_s": 0.0},
            {"retrans_segs": 9, "timeouts": 2, "timeout_s": 0.3},
            {"retrans_segs": "", "timeouts": "", "timeout_s": ""}]  # the flow model's rows
    got = tcp_stalls(rows)
    assert (got["transfers"], got["resent"], got["timed_out"]) == (3, 2, 1)
    assert abs(got["timeout_s"] - 0.3) < 1e-12
    assert "1 had a retransmission timeout" in describe_stalls(got)
    old = tcp_stalls([{"retrans_segs": 1, "timeouts": None}])
    assert "timeout" not in describe_stalls(old)  # unknown on that kernel: not claimed 0
    assert got["rtt_p50_s"] is None and "round trip" not in describe_stalls(got)


def test_a_runs_round_trips_are_the_median_and_its_swing_over_each_connections_least():
    rows = [{"retrans_segs": 0, "rtt_s": 0.010, "min_rtt_s": 0.008},
            {"retrans_segs": 0, "rtt_s": 0.030, "min_rtt_s": 0.010},
            {"retrans_segs": 1, "rtt_s": 0.050, "min_rtt_s": 0.008},
            {"retrans_segs": 0, "rtt_s": "", "min_rtt_s": ""}]  # not read: left out
    got = tcp_stalls(rows)
    assert got["transfers"] == 4
    assert abs(got["rtt_p50_s"] - 0.030) < 1e-12
    assert abs(got["rtt_over_least_p50_s"] - 0.020) < 1e-12  # of 2, 20 and 42 ms
    assert "median 30.0 ms modelled, 20.0 ms over" in describe_stalls(got)


def test_the_replay_error_of_stalled_connections_is_shown_apart():
    from testbed.validate.judging import model_errors

    ref = [{"request": "a", "shard": 0, "tier": 2, "bytes": 1e9, "start": 0, "end": 2.0,
            "timeouts": "1"},
           {"request": "b", "shard": 0, "tier": 2, "bytes": 1e9, "start": 0, "end": 1.0,
            "timeouts": "0"},
           {"request": "c", "shard": 0, "tier": 2, "bytes": 1e9, "start": 0, "end": 1.0}]
    model = [{"request": r, "shard": 0, "start": 0, "end": 1.0} for r in "abc"]
    pairs, _ = model_errors.match_transfers(ref, model)
    assert [p.timed_out for p in pairs] == [True, False, None]
    split = model_errors.stall_split(pairs)
    assert split["timed_out"]["n"] == 1 and split["timed_out"]["median_abs_error"] == 0.5
    assert split["clean"]["n"] == 1 and split["clean"]["median_abs_error"] == 0.0
    assert split["unknown"] == 1
