"""The os-ken application: proactive fat-tree forwarding, DSCP policy, telemetry.

Decisions come from routing.py and telemetry.py (pure); this module only speaks
OpenFlow 1.3, reads tc counters and updates the shared state. `RUNTIME` is set by
testbed.controller.main before os-ken instantiates the app (AppManager builds apps
itself and has no other way in).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub
from os_ken.lib.packet import arp, ethernet, packet
from os_ken.ofproto import ofproto_v1_3

from testbed.controller import routing, telemetry
from testbed.controller.exporter import Metrics
from testbed.controller.state import ControllerState
from testbed.emulation import tc
from testbed.topologies.traffic_classes import CLASSES, CONTROL, KV, trusted_level_dscps

log = logging.getLogger("testbed.controller")

TABLE_CLASSIFY, TABLE_FORWARD = 0, 1
PAIR_COOKIE = 0x5041495200000000  # per-transfer ECMP rules, removed as a set on reroute


@dataclass
class Runtime:
    state: ControllerState
    metrics: Metrics
    poll_s: float = 1.0
    ecmp: str = "per-flow"
    kv_port: int = 7000
    control_ports: tuple[int, ...] = ()


RUNTIME: Runtime | None = None


class FabricController(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if RUNTIME is None:
            raise RuntimeError("testbed.controller.app.RUNTIME must be set before starting")
        self.rt = RUNTIME
        self.state = RUNTIME.state
        self.fabric = self.state.fabric
        self.datapaths = {}
        self.down_ends: set[tuple[str, int]] = set()
        self.groups: dict[str, dict[int, tuple[int, ...]]] = {}
        self.pending_barrier: dict[str, int] = {}
        self._prev: dict[str, dict[str, dict[str, int]]] = {}
        self._prev_t: float | None = None
        self._intents_seen = 0
        self._egress = [(n, i, link) for n, i, link in self.fabric.egress_interfaces()
                        if n in self.fabric.switches]
        self.poller = hub.spawn(self._poll_loop)

    # -- connection ------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _features(self, ev):
        dp = ev.msg.datapath
        name = self.fabric.dpid_to_switch.get(dp.id)
        if name is None:
            log.warning("unknown datapath %016x connected; ignoring it", dp.id)
            return
        self.datapaths[name] = dp
        with self.state.lock:
            self.state.connected.add(name)
        self._install_base(name, dp)
        self._install_routes(only=name)

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _state_change(self, ev):
        if ev.state == DEAD_DISPATCHER and ev.datapath is not None:
            name = self.fabric.dpid_to_switch.get(ev.datapath.id)
            if name and self.datapaths.get(name) is ev.datapath:
                del self.datapaths[name]
                self.groups.pop(name, None)
                with self.state.lock:
                    self.state.connected.discard(name)
                    self.state.ready.discard(name)

    # -- flows -----------------------------------------------------------------------
    def _flow(self, dp, table, priority, match, actions=(), goto=None, cookie=0):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        inst = []
        if actions:
            inst.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, list(actions)))
        if goto is not None:
            inst.append(parser.OFPInstructionGotoTable(goto))
        dp.send_msg(parser.OFPFlowMod(datapath=dp, table_id=table, priority=priority,
                                      match=match, instructions=inst, cookie=cookie))

    def _install_base(self, name, dp):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        dp.send_msg(parser.OFPFlowMod(datapath=dp, command=ofp.OFPFC_DELETE,
                                      table_id=ofp.OFPTT_ALL, out_port=ofp.OFPP_ANY,
                                      out_group=ofp.OFPG_ANY))
        dp.send_msg(parser.OFPGroupMod(dp, ofp.OFPGC_DELETE, 0, ofp.OFPG_ALL))
        self.groups[name] = {}
        # ARP goes to the controller, which answers from the fabric's address plan
        self._flow(dp, TABLE_FORWARD, 300, parser.OFPMatch(eth_type=0x0806),
                   [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)])
        host_ports = [link.port_of(name) for (sw, _), link in self.fabric.switch_ports.items()
                      if sw == name and link.peer_of(name) in self.fabric.hosts]
        # DSCP policy at the ToR ingress: trust the KV priority levels senders set per
        # layer chunk (above all else: MFS and its baselines), mark KV and control by
        # port, trust the class table's code points, re-mark anything else best effort.
        # Inside the fabric: trust.
        for port in host_ports:
            for dscp in trusted_level_dscps():
                match = parser.OFPMatch(in_port=port, eth_type=0x0800, ip_dscp=dscp)
                self._flow(dp, TABLE_CLASSIFY, 250, match, goto=TABLE_FORWARD)
            for field in ("tcp_dst", "tcp_src"):
                for cls, ports in ((KV, (self.rt.kv_port,)), (CONTROL, self.rt.control_ports)):
                    for p in ports:
                        match = parser.OFPMatch(in_port=port, eth_type=0x0800, ip_proto=6,
                                                **{field: p})
                        self._flow(dp, TABLE_CLASSIFY, 200, match,
                                   [parser.OFPActionSetField(ip_dscp=cls.dscp)], TABLE_FORWARD)
            for cls in CLASSES:
                match = parser.OFPMatch(in_port=port, eth_type=0x0800, ip_dscp=cls.dscp)
                self._flow(dp, TABLE_CLASSIFY, 100, match, goto=TABLE_FORWARD)
            self._flow(dp, TABLE_CLASSIFY, 50, parser.OFPMatch(in_port=port, eth_type=0x0800),
                       [parser.OFPActionSetField(ip_dscp=0)], TABLE_FORWARD)
        self._flow(dp, TABLE_CLASSIFY, 0, parser.OFPMatch(), goto=TABLE_FORWARD)

    def _install_routes(self, only: str | None = None):
        down = {routing.link_key(self.fabric.switch_ports[end]) for end in self.down_ends
                if end in self.fabric.switch_ports}
        table = routing.next_hops(self.fabric, down)
        gids = routing.group_ids(table)
        with self.state.lock:
            self.state.down_links = {f"{min(k)}-{max(k)}" for k in down}
        for name, dp in list(self.datapaths.items()):
            if only and name != only:
                continue
            ofp, parser = dp.ofproto, dp.ofproto_parser
            # per-pair rules of the old route set would black-hole a dead port: drop them
            # (the per-destination rules below still route while new pairs are added)
            dp.send_msg(parser.OFPFlowMod(datapath=dp, command=ofp.OFPFC_DELETE,
                                          table_id=TABLE_FORWARD, cookie=PAIR_COOKIE,
                                          cookie_mask=0xFFFFFFFFFFFFFFFF,
                                          out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
            installed = self.groups.setdefault(name, {})
            for (sw, ports), gid in gids.items():
                if sw != name or installed.get(gid) == ports:
                    continue
                buckets = [parser.OFPBucket(weight=1, watch_port=ofp.OFPP_ANY,
                                            watch_group=ofp.OFPG_ANY,
                                            actions=[parser.OFPActionOutput(p)]) for p in ports]
                cmd = ofp.OFPGC_MODIFY if gid in installed else ofp.OFPGC_ADD
                dp.send_msg(parser.OFPGroupMod(dp, cmd, ofp.OFPGT_SELECT, gid, buckets))
                installed[gid] = ports
            for dst, ports in table[name].items():
                ip = self.fabric.hosts[dst].ip
                match = parser.OFPMatch(eth_type=0x0800, ipv4_dst=ip)
                if len(ports) == 1:
                    actions = [parser.OFPActionOutput(ports[0])]
                else:
                    actions = [parser.OFPActionGroup(gids[(name, ports)])]
                self._flow(dp, TABLE_FORWARD, 100, match, actions)
                if self.rt.ecmp in ("per-transfer", "per-pair") and len(ports) > 1:
                    for src in self.fabric.hosts.values():
                        if src.name == dst:
                            continue
                        pm = parser.OFPMatch(eth_type=0x0800, ipv4_src=src.ip, ipv4_dst=ip)
                        port = routing.pair_port(src.ip, ip, ports)
                        self._flow(dp, TABLE_FORWARD, 110, pm, [parser.OFPActionOutput(port)],
                                   cookie=PAIR_COOKIE)
            dp.send_msg(parser.OFPBarrierRequest(dp))
            self.pending_barrier[name] = self.pending_barrier.get(name, 0) + 1

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _barrier(self, ev):
        name = self.fabric.dpid_to_switch.get(ev.msg.datapath.id)
        if name is None:
            return
        left = self.pending_barrier.get(name, 1) - 1
        self.pending_barrier[name] = max(left, 0)
        if left <= 0:
            with self.state.lock:
                self.state.ready.add(name)

    # -- link failures ---------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port_status(self, ev):
        msg = ev.msg
        ofp = msg.datapath.ofproto
        name = self.fabric.dpid_to_switch.get(msg.datapath.id)
        end = (name, msg.desc.port_no)
        if name is None or end not in self.fabric.switch_ports:
            return
        is_down = (msg.reason == ofp.OFPPR_DELETE
                   or bool(msg.desc.state & ofp.OFPPS_LINK_DOWN)
                   or bool(msg.desc.config & ofp.OFPPC_PORT_DOWN))
        was_down = end in self.down_ends
        if is_down == was_down:
            return
        (self.down_ends.add if is_down else self.down_ends.discard)(end)
        link = self.fabric.switch_ports[end]
        log.info("link %s %s (port %s:%s)", link.name, "down" if is_down else "up", *end)
        self._install_routes()

    # -- ARP -------------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        pkt = packet.Packet(msg.data)
        req = pkt.get_protocol(arp.arp)
        if req is None or req.opcode != arp.ARP_REQUEST:
            return
        target = self.fabric.host_by_ip.get(req.dst_ip)
        if target is None:
            return
        reply = packet.Packet()
        reply.add_protocol(ethernet.ethernet(ethertype=0x0806, dst=req.src_mac, src=target.mac))
        reply.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=target.mac, src_ip=target.ip,
                                   dst_mac=req.src_mac, dst_ip=req.src_ip))
        reply.serialize()
        ofp, parser = dp.ofproto, dp.ofproto_parser
        in_port = msg.match["in_port"]
        dp.send_msg(parser.OFPPacketOut(datapath=dp, buffer_id=ofp.OFP_NO_BUFFER,
                                        in_port=ofp.OFPP_CONTROLLER,
                                        actions=[parser.OFPActionOutput(in_port)],
                                        data=reply.data))

    # -- telemetry -------------------------------------------------------------------
    def _poll_loop(self):
        """Poll at a fixed rate: the period is poll_s, not poll_s plus the poll's own time."""
        next_at = time.monotonic()
        while True:
            try:
                self._poll_once()
            except Exception:  # noqa: BLE001 - a bad poll must not kill the loop
                log.exception("telemetry poll failed")
            next_at += self.rt.poll_s
            hub.sleep(max(0.0, next_at - time.monotonic()))

    def _poll_once(self):
        t0 = time.perf_counter()
        names = [intf for _, intf, _ in self._egress]
        counters = tc.all_counters(names)
        now = time.time()
        metrics = self.rt.metrics
        samples = []
        if self._prev_t is not None:
            dt = now - self._prev_t
            for node, intf, link in self._egress:
                if intf not in counters or intf not in self._prev:
                    continue
                bps = telemetry.rates(self._prev[intf], counters[intf], dt)
                samples.append(telemetry.InterfaceRate(intf, f"{node}>{link.peer_of(node)}",
                                                       link.tier, link.rate_bps, bps))
                for cls, counts in counters[intf].items():
                    before = self._prev[intf].get(cls, {})
                    metrics.class_bytes.labels(intf, cls).inc(
                        max(0, counts["bytes"] - before.get("bytes", 0)))
                    metrics.class_drops.labels(intf, cls).inc(
                        max(0, counts["drops"] - before.get("drops", 0)))
        self._prev, self._prev_t = counters, now
        if samples:
            congestion = telemetry.tier_congestion(samples)
            util = {s.link: {c: s.utilisation(c) for c in ("control", "kv", "background")}
                    for s in samples}
            with self.state.lock:
                self.state.congestion = congestion
                self.state.generated_at = now
                self.state.polls += 1
                self.state.link_utilisation = util
                down = len(self.state.down_links)
                intents = self.state.intents_total
            for tier, c in congestion.items():
                metrics.congestion.labels(str(tier)).set(c)
            for s in samples:
                for cls in ("control", "kv", "background"):
                    metrics.link_util.labels(s.link, s.interface, str(s.tier), cls).set(
                        s.utilisation(cls))
            metrics.links_down.set(down)
            metrics.intents.inc(intents - self._intents_seen)
            self._intents_seen = intents
        metrics.poll_latency.observe(time.perf_counter() - t0)
        age = self.state.age_s()
        if age is not None:
            metrics.oracle_age.set(age)
        for dp in list(self.datapaths.values()):
            parser, ofp = dp.ofproto_parser, dp.ofproto
            dp.send_msg(parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY))

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _port_stats(self, ev):
        name = self.fabric.dpid_to_switch.get(ev.msg.datapath.id)
        for stat in ev.msg.body:
            if stat.port_no > 0xFFFFFF00:
                continue
            for direction, value in (("rx", stat.rx_bytes), ("tx", stat.tx_bytes)):
                self.rt.metrics.port_bytes.labels(name, str(stat.port_no), direction).set(value)
