"""Pure parts of the emulation: fabric derivation, routing, telemetry, fidelity, oracle HTTP.

No root needed: these run everywhere.
"""

import json
import math
import threading
import urllib.error
import urllib.request
from collections import Counter

import pytest

from testbed.datapath import tc
from testbed.emulation import cleanup, judge
from testbed.model import congestion
from testbed.sdn.oracle_server import make_server
from testbed.sdn.state import ControllerState
from testbed.topologies import routing
from testbed.topologies.fabric import Fabric
from testbed.topologies.fattree import FatTreeSpec
from testbed.topologies.traffic_classes import CLASSES, KV, class_of_dscp, engine_ports, kv_ports


@pytest.fixture
def fabric():
    return Fabric(FatTreeSpec(), scale=2e-4)


def test_fabric_ports_dpids_and_addresses_are_unique_and_stable(fabric):
    assert len(fabric.switches) == 20 and len(set(fabric.switches.values())) == 20
    assert fabric.switches["core3"] == "0000000000003003"
    ports = Counter((node, link.port_of(node)) for link in fabric.links
                    for node in (link.a, link.b) if node in fabric.switches)
    assert max(ports.values()) == 1  # no port used twice
    ips = [h.ip for h in fabric.hosts.values()]
    assert len(set(ips)) == 16 and fabric.hosts["i0"].ip == "10.0.0.1"
    assert Fabric(FatTreeSpec(), 2e-4).links == fabric.links  # deterministic
    assert len(Fabric(FatTreeSpec(pods=32), 1e-4).hosts) == 256


def test_fabric_rates_are_scaled_and_dilated():
    fab = Fabric(FatTreeSpec(), scale=1e-3, dilation=2.0)
    host = next(lk for lk in fab.links if lk.tier == 1)
    core = next(lk for lk in fab.links if lk.tier == 3)
    assert host.rate_bps == pytest.approx(100e9 * 1e-3 / 2)
    assert core.rate_bps == pytest.approx(25e9 * 1e-3 / 2)
    assert not any(lk.tier == 0 for lk in fab.links)  # NVLink is not emulated
    with pytest.raises(ValueError, match="scale"):
        Fabric(FatTreeSpec(), scale=0)
    with pytest.raises(ValueError, match="dilation"):
        Fabric(FatTreeSpec(), scale=1e-3, dilation=0.5)


def test_routes_use_every_equal_cost_uplink(fabric):
    table = routing.next_hops(fabric, set())
    uplinks = {lk.port_of("tor0") for lk in fabric.links if lk.a == "tor0"}
    assert set(table["tor0"]["i15"]) == uplinks  # cross pod: all 4 aggregation switches
    assert table["tor0"]["i1"] == (fabric.hosts["i1"].tor_port,)  # same rack: the host port
    assert len(table["agg0"]["i15"]) == 2  # two core links per aggregation switch
    assert len(table["core0"]["i15"]) == 1
    gids = routing.group_ids(table)
    assert (("tor0", table["tor0"]["i15"]) in gids)


def test_a_link_down_removes_only_that_path(fabric):
    link = next(lk for lk in fabric.links if {lk.a, lk.b} == {"tor0", "agg0"})
    table = routing.next_hops(fabric, {routing.link_key(link)})
    assert link.port_of("tor0") not in table["tor0"]["i15"]
    assert len(table["tor0"]["i15"]) == 3
    # every host still reaches every other from its ToR
    for host in fabric.hosts.values():
        assert all(dst in table[host.tor] for dst in fabric.hosts if dst != host.name)


def test_a_cut_rack_is_unreachable_not_misrouted(fabric):
    down = {routing.link_key(lk) for lk in fabric.links if "tor3" in (lk.a, lk.b)
            and lk.tier == 2}
    table = routing.next_hops(fabric, down)
    assert "i15" not in table["tor0"]
    assert "i14" in table["tor3"]  # inside the rack it still works


def test_routes_are_up_down_until_a_link_fails_and_then_bounce(fabric):
    # PFC's deadlock needs routes that step down and up again (valleys): shortest live
    # paths take them once an uplink is gone, as short as the way round through the core
    assert routing.valleys(fabric, routing.next_hops(fabric, set())) == []
    level = routing.switch_levels(fabric)
    for a, b in (("tor0", "agg0"), ("agg0", "core0")):
        down = {routing.link_key(lk) for lk in fabric.links if {lk.a, lk.b} == {a, b}}
        found = routing.valleys(fabric, routing.next_hops(fabric, down))
        assert found and all(level[sw] > level[nxt] < level[after]
                             for sw, nxt, after, _ in found), (a, b, found)
        assert all(dst in fabric.hosts for *_, dst in found)


def test_no_one_to_three_failures_leave_a_cycle_of_dependencies_and_four_can(fabric):
    # a pause waits on itself only around a cycle of the channel dependency graph: the
    # fat-tree's up-down routes have none, nor do its detours after one or two switch
    # links fail (every set checked); tor0 left one uplink and tor1 one lost hold one
    import itertools

    def cycle(down):
        table = routing.next_hops(fabric, set(down))
        return routing.dependency_cycle(routing.dependencies(fabric, table))

    core = [routing.link_key(lk) for lk in fabric.links
            if lk.a in fabric.switches and lk.b in fabric.switches]
    assert cycle(()) == []
    assert not any(cycle(ks) for n in (1, 2) for ks in itertools.combinations(core, n))
    found = cycle({frozenset(p) for p in (("tor0", "agg0"), ("tor0", "agg1"),
                                          ("tor0", "agg2"), ("tor1", "agg3"))})
    assert len(found) >= 2 and found[0][0] == found[-1][1]  # it closes on itself
    assert all(a[1] == b[0] for a, b in zip(found, found[1:], strict=False))  # hop by hop


def test_a_dependency_cycle_is_found_and_a_chain_has_none():
    ring = {("A", "B"): {("B", "C")}, ("B", "C"): {("C", "A")}, ("C", "A"): {("A", "B")},
            ("x", "A"): {("A", "B")}}
    got = routing.dependency_cycle(ring)
    assert sorted(got) == [("A", "B"), ("B", "C"), ("C", "A")]
    assert routing.dependency_cycle({("x", "A"): {("A", "B")}, ("A", "B"): {("B", "C")},
                                     ("B", "C"): set()}) == []


def test_per_transfer_ecmp_is_stable_and_spreads_pairs():
    ports = (3, 4, 5, 6)
    picks = Counter(routing.pair_port(f"10.0.0.{s}", f"10.0.0.{d}", ports)
                    for s in range(1, 17) for d in range(1, 17) if s != d)
    assert set(picks) == set(ports) and min(picks.values()) > 30
    assert routing.pair_port("10.0.0.1", "10.0.0.9", ports) == routing.pair_port(
        "10.0.0.1", "10.0.0.9", ports)


def test_rates_and_congestion_exclude_kv():
    prev = {"kv": {"bytes": 0}, "background": {"bytes": 0}, "control": {"bytes": 0}}
    cur = {"kv": {"bytes": 1_000_000}, "background": {"bytes": 250_000},
           "control": {"bytes": 0}}
    bps = congestion.rates(prev, cur, 1.0)
    assert bps["kv"] == 8e6 and bps["background"] == 2e6
    sample = congestion.InterfaceRate("tor0-eth5", "tor0>agg0", 2, 10e6, bps)
    assert sample.external_utilisation == pytest.approx(0.2)
    assert sample.total_utilisation == pytest.approx(1.0)
    idle = congestion.InterfaceRate("tor1-eth5", "tor1>agg0", 2, 10e6, {"kv": 9e6})
    hot = congestion.InterfaceRate("agg0-core0", "agg0>core0", 3, 5e6, {"background": 6e6})
    assert congestion.tier_congestion([sample, idle, hot]) == {
        2: pytest.approx(0.1), 3: congestion.MAX_CONGESTION}
    # a counter reset reads as no traffic, never negative
    assert congestion.rates({"kv": {"bytes": 500}}, {"kv": {"bytes": 100}}, 1.0)["kv"] == 0


def test_traffic_class_table():
    assert KV.dscp == 34 and KV.tos == 0x88
    assert class_of_dscp(48).name == "control" and class_of_dscp(10).name == "background"
    assert sum(c.share for c in CLASSES) == pytest.approx(1.0)
    assert tc._tos_key(KV.dscp) == "0x00880000/0x00fc0000+0"


def test_priority_levels_have_their_own_code_points_and_leaves():
    from testbed.topologies.traffic_classes import (
        SCAVENGER_DSCP,
        level_dscp,
        level_minor,
        level_tos,
        trusted_level_dscps,
    )

    dscps = [level_dscp(k, 8) for k in range(9)]
    assert dscps[:8] == list(range(16, 24)) and dscps[8] == SCAVENGER_DSCP
    assert not set(dscps) & {c.dscp for c in CLASSES}  # no clash with the class table
    assert sorted(trusted_level_dscps()) == sorted(dscps)
    assert level_dscp(4, 4) == SCAVENGER_DSCP  # with 4 levels, level 4 is the scavenger
    assert level_tos(0, 8) == 16 << 2
    assert [level_minor(k) for k in (0, 8)] == [0x21, 0x29]
    with pytest.raises(ValueError):
        level_dscp(9, 8)
    assert tc.queue_packets(5e6, 16) == 21 and tc.queue_packets(1e5, 16) == 16
    assert tc.queue_packets(1e5) == tc.MIN_QUEUE_PACKETS
    # smaller frames: the same bytes in more packets
    assert tc.queue_packets(1e5, 16, 414) == math.ceil(16 * 1514 / 414) == 59
    assert tc.queue_packets(5e6, 16, 757) == 42


def test_fidelity_verdicts():
    ok = judge.LinkFidelity("a", "tor0>agg0", 10e6, 9.8e6, 6)
    slow = judge.LinkFidelity("b", "agg0>core0", 5e6, 3e6, 6)
    brief = judge.LinkFidelity("c", "x>y", 5e6, 1e6, 1)  # not saturated long enough
    good = judge.verdict([ok, brief], [0.3, 0.5, 0.6])
    assert good["verdict"] == "faithful" and good["links_checked"] == 1
    bad = judge.verdict([ok, slow], [0.3, 0.5])
    assert bad["verdict"] == "unfaithful" and "agg0>core0: 60.0%" in bad["reasons"][0]
    cpu = judge.verdict([ok], [0.9] * 20)
    assert cpu["verdict"] == "unfaithful" and cpu["cpu_bound"]
    assert judge.cpu_busy_fraction((100, 200), (150, 300)) == 0.5
    assert judge.saturated({"kv": {"drops": 3, "backlog": 3000}}, {"kv": {"drops": 1}}, 1e5)
    # a burst that overflowed a shallow queue, which then drained: not saturation
    assert not judge.saturated({"kv": {"drops": 3, "backlog": 0}}, {"kv": {"drops": 1}}, 1e5)
    assert judge.saturated({"kv": {"drops": 0, "backlog": 60000}}, {}, 1e5)
    assert not judge.saturated({"kv": {"drops": 0, "backlog": 1500}}, {}, 1e5)


def test_cleanup_only_matches_the_projects_names():
    assert cleanup.INTF_RE.match("tor3-eth2") and cleanup.INTF_RE.match("i12-eth0")
    assert not cleanup.INTF_RE.match("eth0") and not cleanup.INTF_RE.match("s1-eth1")
    assert cleanup.SHELL_RE.search("bash --norc --noediting -is mininet:core1")
    assert not cleanup.SHELL_RE.search("bash -is mininet:h1")


def test_oracle_server_answers_and_validates(fabric):
    state = ControllerState(fabric)
    state.congestion = {2: 0.1, 3: 0.25}
    state.generated_at = 1.0
    server = make_server(state, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with urllib.request.urlopen(f"{base}/oracle", timeout=5) as resp:
            doc = json.loads(resp.read())
        assert doc["congestion"] == {"2": 0.1, "3": 0.25}
        assert doc["tier_bandwidth"]["3"] == 25.0  # modelled units, not scaled
        assert ["i0", "i15", 3] in doc["tier_map"] and doc["age_s"] > 0
        with urllib.request.urlopen(f"{base}/status", timeout=5) as resp:
            assert json.loads(resp.read())["ready"] is False
        bad = urllib.request.Request(f"{base}/intent", b'{"request_id": "r", "src": "i0", '
                                     b'"dst": "i0", "size_bytes": 5}')
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(bad, timeout=5)
        assert err.value.code == 400 and "differ" in err.value.read().decode()
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/nope", timeout=5)
        assert err.value.code == 404
        good = urllib.request.Request(f"{base}/intent", b'{"request_id": "r", "src": "i0", '
                                      b'"dst": "i9", "size_bytes": 5}')
        with urllib.request.urlopen(good, timeout=5) as resp:
            assert resp.status == 202
        assert state.intents_total == 1 and state.intents[0].dst == "i9"
    finally:
        server.shutdown()


def test_the_dscp_policy_trusts_levels_marks_kv_by_port_and_remarks_the_rest(fabric):
    from testbed.sdn import rules

    got = rules.classify_rules([1, 2], kv_ports=kv_ports(7000, "pusher"), control_ports=(7100,))
    by_port = {p: [r for r in got if dict(r.match).get("in_port") == p] for p in (1, 2)}
    assert len(by_port[1]) == len(by_port[2]) > 0
    kv = [r for r in by_port[1] if dict(r.match).get("tcp_dst") == 7000]
    assert kv and kv[0].actions == (("set_dscp", KV.dscp),) and kv[0].goto == rules.TABLE_FORWARD
    assert not [r for r in got if dict(r.match).get("tcp_dst") == 7010]
    # Mooncake's engine: both of its ports, either direction, are KV too
    engine = rules.classify_rules([1], kv_ports=kv_ports(7000, "mooncake"), control_ports=())
    for port in engine_ports(7000):
        for field in ("tcp_dst", "tcp_src"):
            (rule,) = [r for r in engine if dict(r.match).get(field) == port]
            assert rule.actions == (("set_dscp", KV.dscp),)
    # the catch-all re-marks best effort below every trusted or port rule
    (rest,) = [r for r in by_port[1] if dict(r.match) == {"in_port": 1, "eth_type": 0x0800}]
    assert rest.actions == (("set_dscp", 0),)
    assert rest.priority < min(r.priority for r in by_port[1] if r is not rest)
    assert any(r.actions == (("controller",),) for r in got)  # ARP to the controller


@pytest.mark.parametrize("ecmp", ["per-pair", "per-flow"])
def test_forwarding_rules_pin_the_pair_path_only_under_per_pair(fabric, ecmp):
    from testbed.sdn import rules

    table, gids, down = rules.route_table(fabric, set())
    assert not down and gids
    tor = "tor0"
    got = rules.forward_rules(fabric, tor, table, gids, ecmp)
    pinned = [r for r in got if r.cookie == rules.PAIR_COOKIE]
    assert bool(pinned) == (ecmp == "per-pair")
    assert len([r for r in got if r.priority == 100]) == len(table[tor])
    if ecmp == "per-pair":  # each pinned port is the one the flow model follows
        paths = routing.PairPaths(fabric.spec)
        checked = 0
        for r in pinned:
            m = dict(r.match)
            src = fabric.host_by_ip[m["ipv4_src"]].name
            dst = fabric.host_by_ip[m["ipv4_dst"]].name
            hops = [h for h in paths.path(src, dst) if h[0] == tor]
            if hops:  # the pair's packets pass this switch
                assert fabric.switch_ports[(tor, r.actions[0][1])].peer_of(tor) == hops[0][1]
                checked += 1
        assert checked > 0


def _raw_post(port: int, headers: dict[str, str], body: bytes) -> tuple[int, str]:
    """A POST with exactly these headers (urllib would fix Content-Length itself)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.putrequest("POST", "/intent", skip_accept_encoding=True)
    for k, v in headers.items():
        conn.putheader(k, v)
    conn.endheaders()
    conn.send(body)
    resp = conn.getresponse()
    out = resp.status, resp.read().decode()
    conn.close()
    return out


GOOD = b'{"request_id": "r", "src": "i0", "dst": "i9", "size_bytes": 5}'


@pytest.mark.parametrize("headers, body, code, says", [
    ({"Content-Length": "-1"}, GOOD, 400, "Content-Length"),
    ({"Content-Length": "abc"}, GOOD, 400, "Content-Length"),
    ({}, GOOD, 411, "Content-Length"),
    ({"Content-Length": str(5 * 2**20)}, b"x" * 1000, 413, "body over"),
    (None, b"[1,2]", 400, "JSON object"),
    (None, b'{"request_id": "r", "src": "i0", "dst": "zz", "size_bytes": 5}', 400, "dst"),
    (None, b'{"request_id": "r", "src": "i0", "dst": "i9", "size_bytes": -5}', 400,
     "size_bytes"),
    (None, b'{"request_id": "r", "src": "i0", "dst": "i9", "size_bytes": "5"}', 400,
     "size_bytes"),
    (None, b'{"request_id": "r", "src": "i0", "dst": "i9", "size_bytes": 5, "x": 1}', 400,
     "unknown field"),
])
def test_the_intent_endpoint_bounds_and_checks_what_it_takes(fabric, headers, body, code, says):
    state = ControllerState(fabric)
    server = make_server(state, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    headers = {"Content-Length": str(len(body))} if headers is None else headers
    try:
        got, text = _raw_post(server.server_address[1], headers, body)
        assert got == code and says in text, text
        assert state.intents_total == 0
    finally:
        server.shutdown()


def test_a_token_guards_the_intent_endpoint_and_stored_intents_are_capped(fabric, monkeypatch):
    from testbed.sdn import state as state_mod

    state = ControllerState(fabric)
    server = make_server(state, "127.0.0.1", 0, token="s3cret-token-0123456789")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    length = {"Content-Length": str(len(GOOD))}
    try:
        assert _raw_post(port, length, GOOD)[0] == 401
        assert _raw_post(port, {**length, "Authorization": "Bearer wrong"}, GOOD)[0] == 401
        ok = {**length, "Authorization": "Bearer s3cret-token-0123456789"}
        assert _raw_post(port, ok, GOOD)[0] == 202
    finally:
        server.shutdown()
    monkeypatch.setattr(state_mod, "MAX_INTENT_BYTES", 1000)
    from testbed.model.oracle import TransferIntent

    for k in range(100):
        state.store_intent(TransferIntent(f"r{k}" + "x" * 50, "i0", "i9", 5))
    assert state.intents_total == 101 and state.intents_bytes <= 1000
    assert state.intents[-1].request_id.startswith("r99") and len(state.intents) < 20


def test_a_bind_beyond_loopback_needs_a_token(write_scenario):
    from testbed.scenario import ScenarioError, load_scenario

    with pytest.raises(ScenarioError, match="emulation.token"):
        load_scenario(write_scenario("name: x\nworkload: {trace: TRACE}\n"
                                     "emulation: {bind: 0.0.0.0}\n"))
    with pytest.raises(ScenarioError, match="not an IP address"):
        load_scenario(write_scenario("name: x\nworkload: {trace: TRACE}\n"
                                     "emulation: {bind: localhost}\n"))
    sc = load_scenario(write_scenario("name: x\nworkload: {trace: TRACE}\nemulation: "
                                      "{bind: 0.0.0.0, token: abcdefghijklmnop}\n"))
    assert sc.emulation.token == "abcdefghijklmnop"


def test_a_backlog_that_stood_half_the_interval_tests_the_link_and_a_brief_one_does_not():
    assert judge.standing(50, 50) == 1.0
    assert judge.standing(50, 30) == 0.6
    assert judge.standing(50, 20) is None  # the link idled for want of packets
    assert judge.standing(5, 5) is None  # too few samples: the snapshot test decides
    # a link judged by its rate while backlogged: 60% busy at 57% of the rate is 95%
    lk = judge.LinkFidelity("a", "tor0>agg0", 10e6, 5.7e6 / 0.6, 4, 0.6)
    doc = judge.verdict([lk], [0.3], backlog_hz=100.0)
    assert doc["verdict"] == "faithful" and doc["links"][0]["backlog_share"] == 0.6
    assert "100 Hz" in doc["saturation_test"]
    assert "snapshot" in judge.verdict([lk], [0.3])["saturation_test"]


def test_a_qdisc_reply_is_parsed_for_its_backlog():
    import struct

    from testbed.datapath import backlog, rtnl

    queue = struct.pack("=IIIII", 7, 10598, 2, 0, 9)  # qlen, backlog, drops, requeues, over
    inner = struct.pack("=HH", 4 + len(queue), rtnl.TCA_STATS_QUEUE) + queue
    basic = struct.pack("=HH", 4 + 16, 1) + bytes(16)  # TCA_STATS_BASIC, skipped
    stats2 = struct.pack("=HH", 4 + len(basic) + len(inner), rtnl.TCA_STATS2 | 0x8000)
    kind = struct.pack("=HH", 8, 1) + b"htb\0"
    body = struct.pack("=BxxxiIII", 0, 42, 0x10000, rtnl.TC_H_ROOT, 1) + kind + stats2 \
        + basic + inner
    msg = struct.pack("=IHHII", 16 + len(body), rtnl.RTM_NEWQDISC, 0, 1, 0) + body
    error = struct.pack("=IHHII", 36, rtnl.NLMSG_ERROR, 0, 2, 0) + bytes(20)
    assert backlog.parse_queue(msg + error) == {42: (10598, 7)}
    assert backlog._count(msg + error) == 2
