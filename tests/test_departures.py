"""Mininet-HiFi's per-packet test on tracepoint lines, and how its figures enter the verdict."""

from __future__ import annotations

import pytest

from testbed.datapath import departures
from testbed.datapath.departures import Spacing, spacing
from testbed.emulation import judge
from testbed.model.tcp import WIRE_FRAME

RATE = 12e6  # a 1514-byte frame takes ~1.009 ms
FRAME = WIRE_FRAME * 8 / RATE


def _queue(t: float, skb: str, dev: str = "tor0-eth5", length: int = WIRE_FRAME) -> str:
    return f"  cat-1 [000] b.... {t:.6f}: net_dev_queue: dev={dev} skbaddr={skb} len={length}"


def _enq(t: float, skb: str, ifindex: int = 7) -> str:
    return (f"  cat-1 [000] b..1. {t:.6f}: qdisc_enqueue: enqueue ifindex={ifindex} qdisc "
            f"handle=0x10000 parent=0xFFFFFFFF skbaddr={skb}")


def _deq(t: float, skb: str, ifindex: int = 7, packets: int = 1) -> str:
    return (f"  <idle>-0 [001] ..s1. {t:.6f}: qdisc_dequeue: dequeue ifindex={ifindex} qdisc "
            f"handle=0x10000 parent=0xFFFFFFFF txq_state=0x0 packets={packets} skbaddr={skb}")


def _burst(n: int, gaps: list[float]) -> list[str]:
    """n packets queued at once at t=0, then dequeued: the first at once, each next one
    `gaps[k]` after the previous."""
    lines = []
    for k in range(n):
        lines += [_queue(0.0, f"{k:016x}"), _enq(0.0, f"{k:016x}")]
    t = 0.0
    for k in range(n):
        t += gaps[k - 1] if k else 0.0
        lines.append(_deq(t, f"{k:016x}"))
    return lines


LINKS = {"tor0-eth5": (7, RATE)}


def test_a_link_that_sends_back_to_back_while_queued_is_on_time():
    got = spacing(_burst(5, [FRAME] * 4), LINKS)["tor0-eth5"]
    assert (got.judged, got.late, got.sent_bytes) == (4, 0, 5 * WIRE_FRAME)
    assert abs(got.p99_late_frames) < 1e-3 and got.late_share == 0.0
    # 5 frames sent over 4 frame times of first..last departure: busy throughout
    assert got.idle_share(RATE) == 0.0
    idle = spacing(_burst(3, [FRAME, 5 * FRAME]), LINKS)["tor0-eth5"]
    assert abs(idle.idle_share(RATE) - 0.5) < 1e-6  # 3 frames' work over 6 frame times


def test_a_departure_more_than_a_frame_late_with_a_queue_counts_and_one_within_does_not():
    got = spacing(_burst(5, [FRAME, 1.5 * FRAME, 2.2 * FRAME, FRAME]), LINKS)["tor0-eth5"]
    assert (got.judged, got.late) == (4, 1)  # 0.5 frames late is within; 1.2 is not
    assert 1.1 < got.p99_late_frames < 1.3


def test_packets_sent_ahead_of_the_wire_do_not_make_the_next_one_late():
    # HTB lets a frame of burst and another class's ACK leave at once; the packet after
    # them leaves when the wire would have sent all three: on time, although it follows
    # the ACK by two frame times
    ack = 66
    lines = []
    for k, length in enumerate([WIRE_FRAME, WIRE_FRAME, ack, WIRE_FRAME, WIRE_FRAME]):
        lines += [_queue(0.0, f"p{k}", length=length), _enq(0.0, f"p{k}")]
    wire = (2 * WIRE_FRAME + ack) * 8 / RATE
    lines += [_deq(0.0, "p0"), _deq(0.0, "p1"), _deq(0.0, "p2"), _deq(wire, "p3"),
              _deq(wire + 2.5 * FRAME, "p4")]  # the wire idle 1.5 frames: late
    got = spacing(lines, LINKS)["tor0-eth5"]
    assert (got.judged, got.late) == (4, 1)
    assert 1.4 < got.p99_late_frames < 1.6


def test_an_idle_gap_after_the_queue_emptied_is_the_traffics_not_judged():
    lines = [_queue(0.0, "a"), _enq(0.0, "a"), _deq(0.0, "a"),
             _queue(0.5, "b"), _enq(0.5, "b"), _deq(0.5, "b")]
    assert spacing(lines, LINKS) == {}  # nothing was ever waiting behind a departure


def test_dropped_packets_other_devices_and_foreign_namespaces_are_not_counted():
    lines = [_queue(0.0, "a"), _enq(0.0, "a"),
             _queue(0.0, "b"),  # dropped: never enqueued, so no queue behind "a"
             _queue(0.0, "c", dev="eth0"), _enq(0.0, "c"),  # not a switch egress of ours
             _enq(0.0, "d", ifindex=9),  # same skb space, other ifindex
             _deq(0.0, "a"), _deq(0.3, "c")]
    assert spacing(lines, LINKS) == {}


def test_a_bulk_dequeue_takes_its_packets_off_the_queue_and_charges_their_bytes():
    lines = []
    for k in range(3):
        lines += [_queue(0.0, f"s{k}"), _enq(0.0, f"s{k}")]
    lines += [_deq(0.0, "s0", packets=2), _deq(2 * FRAME, "s2")]  # two frames' time later
    got = spacing(lines, LINKS)["tor0-eth5"]
    assert (got.judged, got.late) == (1, 0)


def test_late_departures_make_a_run_unfaithful_and_overrule_a_sampled_low_rate():
    ok = judge.LinkFidelity("tor0-eth5", "tor0>agg0", 10e6, 8.6e6, 6, 0.7)
    on_time = {"tor0-eth5": ("tor0>agg0", Spacing(5000, 3, 0.05))}
    doc = judge.verdict([ok], [0.3], backlog_hz=100.0, departures=on_time)
    assert doc["verdict"] == "faithful"  # 86% by the samples, but every packet on time
    assert "judged on time" in doc["warnings"][0] and doc["departures"][0]["late"] == 3
    late = {"tor0-eth5": ("tor0>agg0", Spacing(5000, 400, 3.0))}
    doc = judge.verdict([ok], [0.3], backlog_hz=100.0, departures=late)
    assert doc["verdict"] == "unfaithful"
    assert any("sent late while queued" in r and "8.0%" in r for r in doc["reasons"])
    assert any("below 95%" in r for r in doc["reasons"])
    few = {"tor0-eth5": ("tor0>agg0", Spacing(50, 40, 3.0))}  # too few to judge either way
    doc = judge.verdict([ok], [0.3], backlog_hz=100.0, departures=few)
    assert doc["verdict"] == "unfaithful" and not any("late" in r for r in doc["reasons"])
    assert judge.verdict([ok], [0.3])["departure_test"] is None


def test_the_report_line_sums_the_judged_links_and_names_the_worst():
    departures = {"a": ("tor0>agg0", Spacing(5000, 5, 0.1)),
                  "b": ("agg0>core0", Spacing(3000, 30, 0.9)),
                  "c": ("core0>agg4", Spacing(20, 20, 5.0))}  # too few: not counted
    doc = judge.verdict([], [0.3], backlog_hz=100.0, departures=departures)
    got = judge.departure_summary(doc)
    assert got == {"links": 2, "judged": 8000, "late": 35, "worst_link": "agg0>core0",
                   "worst_late_share": 0.01}
    assert judge.describe_departures(got) == (
        "35 of 8000 queued departures late on 2 links (worst agg0>core0: 1.00%)")
    assert judge.departure_summary(judge.verdict([], [0.3])) is None


def test_a_tracer_without_tracefs_mounts_it_or_names_it_and_leaves_nothing(
        tmp_path, monkeypatch):
    """A machine without systemd does not mount tracefs at boot: start() mounts it, and
    where that fails (here: no mount point) it says so before making anything."""
    missing = tmp_path / "no-such-dir" / "tracing"
    monkeypatch.setattr(departures, "TRACEFS", missing)
    monkeypatch.setattr(departures, "_ifindexes", lambda names, netns: {n: 7 for n in names})
    tracer = departures.DepartureTracer({"s0-eth1": 1e9}, tmp_path / "t.trace")
    with pytest.raises(OSError, match="no tracefs at .*mounting it there failed"):
        tracer.start()
    assert not missing.exists() and not (tmp_path / "t.trace").exists()
