"""Worker protocol and KV byte streams, on loopback (no root needed)."""

import re
import socket
import struct
import threading

import pytest

from testbed.model.kv import MODEL_PRESETS, kv_shard_bytes
from testbed.topologies.traffic_classes import KV
from testbed.workers import kvstream, protocol


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
         "host": "10.0.0.8", "port": 7000, "wire": [1, 1, 1, 1]}
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
    assert kvstream.scaled_bytes(shard, 2e-4) == round(shard * 2e-4)
    assert kvstream.scaled_bytes(0, 2e-4) == 0 and kvstream.scaled_bytes(10, 1e-9) == 1


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

    rx = kvstream.KVReceiver("127.0.0.1", 0, on_shard, errors.append).start()
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
                             lambda m: (errors.append(m), got_error.set())).start()
    try:
        with socket.create_connection(("127.0.0.1", rx.port)) as sock:
            sock.sendall(protocol.kv_header("r1", 0, 1, 1000) + b"x" * 10)
            sock.shutdown(socket.SHUT_WR)
            assert sock.recv(1) == b""  # no acknowledgement for a short shard
        assert got_error.wait(5)
    finally:
        rx.close()
    assert not landed and "990 bytes missing" in errors[0]
