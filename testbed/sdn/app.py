"""The os-ken application: the shell that speaks OpenFlow 1.3 for the controller.

What to install comes from rules.py (pure: DSCP policy, forwarding, ECMP groups), the
telemetry from poller.py; this module only turns rules into messages, follows switches
and port status, answers ARP and drives the poll. `RUNTIME` is set by
testbed.sdn.main before os-ken instantiates the app (AppManager builds apps
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

from testbed.sdn import rules as R
from testbed.sdn.exporter import Metrics
from testbed.sdn.poller import Poller
from testbed.sdn.state import ControllerState

log = logging.getLogger("testbed.sdn")


@dataclass
class Runtime:
    state: ControllerState
    metrics: Metrics
    poll_s: float = 1.0
    ecmp: str = "per-flow"
    kv_ports: tuple[int, ...] = (7000,)  # traffic_classes.kv_ports
    control_ports: tuple[int, ...] = ()
    daemons: int = 0  # private OVS daemons (placement.private_daemons)
    read_counters: object = None  # the poller's counter reader; None: this machine's


RUNTIME: Runtime | None = None


class FabricController(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if RUNTIME is None:
            raise RuntimeError("testbed.sdn.app.RUNTIME must be set before starting")
        self.rt = RUNTIME
        self.state = RUNTIME.state
        self.fabric = self.state.fabric
        self.datapaths = {}
        self.down_ends: set[tuple[str, int]] = set()
        self.groups: dict[str, dict[int, tuple[int, ...]]] = {}
        self.pending_barrier: dict[str, int] = {}
        self.telemetry = Poller(self.fabric, self.state, RUNTIME.metrics, RUNTIME.daemons,
                                RUNTIME.read_counters)
        self.poller = hub.spawn(self._poll_loop)

    # -- connection ------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _features(self, ev):
        dp = ev.msg.datapath
        # the id from the message: os-ken's own handler sets dp.id from it in another
        # app's thread, which on a slow machine (a VM under software emulation) had not
        # run yet, and the switch was ignored for good
        dpid = ev.msg.datapath_id
        if dp.id is None:
            dp.id = dpid
        name = self.fabric.dpid_to_switch.get(dpid)
        if name is None:
            log.warning("unknown datapath %016x connected; ignoring it", dpid)
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
    def _send_rule(self, dp, rule: R.Rule):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        actions = []
        for act in rule.actions:
            if act[0] == "output":
                actions.append(parser.OFPActionOutput(act[1]))
            elif act[0] == "group":
                actions.append(parser.OFPActionGroup(act[1]))
            elif act[0] == "set_dscp":
                actions.append(parser.OFPActionSetField(ip_dscp=act[1]))
            else:  # controller
                actions.append(parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER))
        inst = []
        if actions:
            inst.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions))
        if rule.goto is not None:
            inst.append(parser.OFPInstructionGotoTable(rule.goto))
        dp.send_msg(parser.OFPFlowMod(datapath=dp, table_id=rule.table, priority=rule.priority,
                                      match=parser.OFPMatch(**dict(rule.match)),
                                      instructions=inst, cookie=rule.cookie))

    def _install_base(self, name, dp):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        dp.send_msg(parser.OFPFlowMod(datapath=dp, command=ofp.OFPFC_DELETE,
                                      table_id=ofp.OFPTT_ALL, out_port=ofp.OFPP_ANY,
                                      out_group=ofp.OFPG_ANY))
        dp.send_msg(parser.OFPGroupMod(dp, ofp.OFPGC_DELETE, 0, ofp.OFPG_ALL))
        self.groups[name] = {}
        host_ports = [link.port_of(name) for (sw, _), link in self.fabric.switch_ports.items()
                      if sw == name and link.peer_of(name) in self.fabric.hosts]
        for rule in R.classify_rules(host_ports, self.rt.kv_ports, self.rt.control_ports):
            self._send_rule(dp, rule)

    def _install_routes(self, only: str | None = None):
        table, gids, down_names = R.route_table(self.fabric, self.down_ends)
        with self.state.lock:
            self.state.down_links = down_names
        for name, dp in list(self.datapaths.items()):
            if only and name != only:
                continue
            ofp, parser = dp.ofproto, dp.ofproto_parser
            # per-pair rules of the old route set would black-hole a dead port: drop them
            # (the per-destination rules below still route while new pairs are added)
            dp.send_msg(parser.OFPFlowMod(datapath=dp, command=ofp.OFPFC_DELETE,
                                          table_id=R.TABLE_FORWARD, cookie=R.PAIR_COOKIE,
                                          cookie_mask=0xFFFFFFFFFFFFFFFF,
                                          out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
            installed = self.groups.setdefault(name, {})
            for gid, ports in R.switch_groups(name, gids).items():
                if installed.get(gid) == ports:
                    continue
                buckets = [parser.OFPBucket(weight=1, watch_port=ofp.OFPP_ANY,
                                            watch_group=ofp.OFPG_ANY,
                                            actions=[parser.OFPActionOutput(p)]) for p in ports]
                cmd = ofp.OFPGC_MODIFY if gid in installed else ofp.OFPGC_ADD
                dp.send_msg(parser.OFPGroupMod(dp, cmd, ofp.OFPGT_SELECT, gid, buckets))
                installed[gid] = ports
            for rule in R.forward_rules(self.fabric, name, table, gids, self.rt.ecmp):
                self._send_rule(dp, rule)
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
        self.telemetry.poll()
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
