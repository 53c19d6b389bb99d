"""What the machine drops or holds before the emulated fabric: parsing the kernel's and
ss's figures, the reader's deltas over a run, and the judgement."""

import socket

import pytest

from testbed.datapath import input_queues as ingress
from testbed.emulation import judge
from testbed.emulation.ingress import ingress_judgement

SOFTNET = ("0004e5a1 00000000 00000002 00000000 00000000 00000000 00000000 00000000 "
           "00000000 00000000 00000000 00000000 00000000\n"
           "000a1b2c 0000001f 00000000 00000000 00000000 00000000 00000000 00000000 "
           "00000000 00000000 00000000 00000001 00000000\n")

PACKET = """sk               RefCnt Type Proto  Iface R Rmem   User   Inode
00000000662faae9 3      3    0003   41    1 4608   0      1001
00000000aa2faae9 3      3    0003   42    1 0      0      1002
00000000bb2faae9 3      3    0003   7     1 9216   0      2001
00000000cc2faae9 2      3    0000   0     0 0      0      1009
"""

SS = """Netid State  Recv-Q Send-Q Local Address:Port Peer Address:PortProcess
p_raw UNCONN 0      0        [0]:*  *    users:(("ovs-vswitchd",pid=42,fd=200)) ino:1001 sk:1
\tver:0 cpy_thresh:0 flags( 0 ) skmem:(r4608,rb212992,t0,tb212992,f0,w0,o0,bl0,d3)
p_raw UNCONN 0      0        [41]:* *    users:(("ovs-vswitchd",pid=42,fd=201)) ino:1002 sk:2
\tver:0 cpy_thresh:0 flags( 0 ) skmem:(r0,rb106496,t0,tb212992,f0,w0,o0,bl0,d0)
p_raw UNCONN 0      0        [7]:*  *    users:(("tcpdump",pid=77,fd=3)) ino:2001 sk:3
\tver:0 cpy_thresh:0 flags( 0 ) skmem:(r9216,rb212992,t0,tb212992,f0,w0,o0,bl0,d50)
p_raw UNCONN 0      0        [0]:*  *    users:(("ovs-vswitchd",pid=42,fd=14)) ino:1009 sk:4
\tver:0 cpy_thresh:0 flags( 0 ) skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d0)
"""


DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop
    lo:  999999     10    0    0    0     0          0         0   999999      10    0    0
s1-eth1: 1000       5    0    0    0     0          0         0     300       2    0    0
s1-eth2:   500       2    0    0    0     0          0         0       0       0    0    0
"""


def test_parses_the_input_backlogs_drops_the_sockets_memory_and_their_owners():
    assert ingress.softnet_drops(SOFTNET) == 0x1f  # the second column, summed over CPUs
    assert ingress.socket_memory(PACKET) == {1001: (41, 4608), 1002: (42, 0),
                                             2001: (7, 9216), 1009: (0, 0)}
    socks = ingress.packet_sockets(SS, "ovs-vswitchd")
    assert set(socks) == {1001, 1002, 1009}  # tcpdump's socket is not the datapath's
    assert socks[1001] == ingress.PacketSocket(1001, 42, 3, 212992)
    assert socks[1002].rcvbuf == 106496 and socks[1002].drops == 0
    lo = socket.if_nametoindex("lo")  # the kernel's own lookup, gone indexes left out
    assert ingress.names_of({lo, 2**31 - 1}) == {lo: "lo"}
    assert ingress.received_bytes(DEV, {"s1-eth1", "s1-eth2"}) == 1500  # not lo's


def _proc(tmp_path, softnet: str, packet: str):
    (tmp_path / "net").mkdir(exist_ok=True)
    (tmp_path / "net" / "softnet_stat").write_text(softnet)
    (tmp_path / "42" / "ns").mkdir(parents=True, exist_ok=True)
    (tmp_path / "42" / "ns" / "net").write_text("")
    (tmp_path / "42" / "net").mkdir(exist_ok=True)
    (tmp_path / "42" / "net" / "packet").write_text(packet)
    (tmp_path / "42" / "net" / "dev").write_text(DEV)


def test_the_reader_counts_drops_over_the_run_and_the_datapaths_buffers_only(tmp_path,
                                                                           monkeypatch):
    _proc(tmp_path, SOFTNET, PACKET)
    listings = iter([SS, SS.replace("d3)", "d10)").replace("ino:1002", "ino:1003")])
    monkeypatch.setattr(ingress, "_ss", lambda pid, owner: ingress.packet_sockets(
        next(listings), owner))
    monkeypatch.setattr(ingress, "_port_names", lambda pid, indexes: {
        i: n for i, n in {41: "s1-eth1", 42: "s1-eth2"}.items() if i in indexes})
    reader = ingress.IngressReader([42], proc=tmp_path).start()
    assert set(reader.sockets) == {1001, 1002}  # 1009 is bound to no port
    assert reader.received() == 1500  # the two ports' intake; interface 7 is tcpdump's
    held, fullest = reader.read()
    assert held == 4608  # the datapath's two sockets; tcpdump's 9216 is not counted
    assert fullest == pytest.approx(4608 / 212992)
    reader.sample()  # kept for the judgement
    assert list(reader.held) == [4608] and reader.fullest == pytest.approx(fullest)
    assert list(reader.intake) == [1500] and len(reader.at) == 1
    _proc(tmp_path, SOFTNET.replace("0000001f", "00000024"), PACKET)
    # socket 1002 closed during the run, 1003 opened: only sockets open at both ends count
    assert reader.stop() == {"backlog_drops": 5, "socket_drops": 7, "sockets": 2, "ports": 2}


def test_a_fabric_reads_only_the_daemons_in_its_own_namespaces(tmp_path):
    # fabrics side by side: each has its own daemons, in namespaces of its own
    for pid, ns in ((42, "mine"), (43, "theirs"), (44, "mine")):
        (tmp_path / "netns").mkdir(exist_ok=True)
        (tmp_path / "netns" / ns).touch()
        (tmp_path / str(pid) / "ns").mkdir(parents=True)
        (tmp_path / str(pid) / "ns" / "net").hardlink_to(tmp_path / "netns" / ns)
    mine = {str(tmp_path / "netns" / "mine")}
    assert ingress.daemons_in([42, 43, 44, 45], mine, proc=tmp_path) == [42, 44]
    assert ingress.daemons_in([42], {str(tmp_path / "gone")}, proc=tmp_path) == []


def test_any_machine_drop_fails_the_run_and_a_half_full_buffer_warns():
    ok = judge.LinkFidelity("a", "tor0>agg0", 10e6, 9.8e6, 6)
    clean = ingress_judgement({"backlog_drops": 0, "socket_drops": 0, "sockets": 80},
                              [0, 4608, 9216, 2304], 0.2)
    assert not clean["reasons"] and not clean["warnings"]
    assert clean["figures"]["held_max_bytes"] == 9216
    assert clean["figures"]["held_p50_bytes"] in (2304, 4608)
    fine = judge.verdict([ok], [0.3], ingress=clean)
    assert fine["verdict"] == "faithful" and fine["ingress"]["sockets"] == 80
    lost = ingress_judgement({"backlog_drops": 2, "socket_drops": 1, "sockets": 80}, [], 0.6)
    assert "dropped 3 packets" in lost["reasons"][0]
    assert "60%" in lost["warnings"][0]
    bad = judge.verdict([ok], [0.3], ingress=lost)
    assert bad["verdict"] == "unfaithful" and lost["reasons"][0] in bad["reasons"]
    assert any("time_dilation" in a for a in bad["advice"])
    unread = ingress_judgement(None, [], 0.0, "ss: not found")
    assert not unread["reasons"] and unread["figures"]["error"] == "ss: not found"


def test_the_wait_is_what_is_held_over_the_rate_the_ports_took_bytes_in():
    from testbed.emulation.ingress import ingress_wait

    # 1 MB/s in, 10 ms samples, one interval idle: Little's law on the mean held
    held, at = [2000, 4000, 0, 6000], [0.0, 0.01, 0.02, 0.03]
    intake = [0, 10_000, 10_000, 30_000]
    got = ingress_wait(held, intake, at)
    assert got["intake_mb_per_s"] == pytest.approx(1.0)
    assert got["wait_mean_ms"] == pytest.approx(3.0)  # 3000 bytes / 1 MB/s
    # the p99 held (6000) drained at the busy intervals' 1.5 MB/s
    assert got["wait_p99_ms"] == pytest.approx(4.0)
    idle = ingress_wait([100, 100], [5, 5], [0.0, 0.01])
    assert idle == {"intake_mb_per_s": None, "wait_mean_ms": None, "wait_p99_ms": None}
    assert ingress_wait([], [], [])["wait_mean_ms"] is None
    figures = ingress_judgement(None, held, 0.1, None, intake, at)["figures"]
    assert figures["wait_mean_ms"] == pytest.approx(3.0)


def test_summary_counts_both_drops_and_none_where_unread():
    from testbed.emulation.ingress import machine_drops

    assert machine_drops({"backlog_drops": 2, "socket_drops": 5, "sockets": 80}) == 7
    assert machine_drops(ingress_judgement(None, [], 0.0)["figures"]) is None
    assert machine_drops(None) is None
