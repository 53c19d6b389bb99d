"""The packet-level replica: its scale, time dilation, datapath and the knobs of the
fabric that carries it."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field, field_validator, model_validator

from testbed.clock import Dilation
from testbed.model.tcp import MIN_FRAME, WIRE_FRAME
from testbed.scenario.base import _Strict


class EmulationCfg(_Strict):
    """Packet-level emulation: a scaled replica of the modelled fabric."""

    scale: float = Field(
        2e-4, gt=0, le=1,
        description="multiplies every bandwidth and KV byte count (100 Gbps -> 20 Mbit/s)",
    )
    time_dilation: float = Field(1.0, ge=1, le=1000,
                                 description="slows bandwidth down when CPU-bound")
    datapath: Literal["auto", "kernel", "user"] = Field("auto", description=(
        "Open vSwitch's datapath: kernel, userspace (netdev), or auto (the kernel one "
        "where its module loads)"))
    start_timeout_s: float = Field(
        120.0, ge=5, le=3600, description="wall seconds every worker has to start and "
        "connect to the router before the run fails: raise it for slow or software-emulated "
        "servers (a cluster run starts each remote worker over SSH)")
    ovs_instances: int | Literal["auto"] = Field(
        "auto", description="Open vSwitch daemons the userspace datapath is split over, "
        "each in its own network namespace, switches shared out round-robin per layer: the "
        "userspace datapath forwards every port in one thread, so one daemon is one core. "
        "auto: chosen when the run starts, from the machine: 1 (the system's OVS) on the "
        "kernel datapath, over a cluster or on 4 cores or fewer, else a daemon per 4 cores "
        "(of the fabric's share when fabrics run side by side), at most the switches "
        "(docs/fabric.md)")
    private_ovs: bool = Field(
        False, description="carry the switches on the run's own OVS daemon(s) in their own "
        "namespaces even with ovs_instances 1, not the system's Open vSwitch (userspace "
        "datapath); fabrics run side by side (--fabrics) set it for you")
    bind: str = Field("127.0.0.1", description="controller, oracle and metrics address: "
                      "loopback unless switches or schedulers on other machines need them")
    token: str | None = Field(
        None, min_length=16, max_length=256, pattern=r"^[\x21-\x7e]+$",
        description="bearer token POST /intent requires (Authorization: Bearer ...); "
        "required when bind is not loopback. It is saved with the run's scenario.yaml")
    of_port: int = Field(6653, ge=1, le=65535, description=(
        "the SDN controller's OpenFlow port"))
    oracle_port: int = Field(8000, ge=1, le=65535, description=(
        "the controller's oracle HTTP port"))
    metrics_port: int = Field(9464, ge=1, le=65535, description="not 9100: node exporter")
    poll_s: float = Field(1.0, ge=0.05, le=3600,
                          description="telemetry poll and oracle refresh period")
    kv_port: int = Field(7000, ge=1, le=65535, description="TCP port marked as the KV class")
    queue_min_packets: int = Field(
        16, ge=4, le=10000, description="leaf queue depth floor in full-size (1514-byte) "
        "packets (queues are 50 ms at the replica's rate in modelled time, so the same "
        "packets at any time_dilation, at least this; with a smaller "
        "frame_bytes the same bytes in more packets): packets do not scale with the scale "
        "factor")
    layer_chunks: bool = Field(
        False, description="send KV layer by layer with a DSCP priority level per layer "
        "chunk (HTB level classes on every egress); always on under a non-fair "
        "network.flow_policy; set it for fair runs compared against those")
    frame_bytes: int = Field(
        WIRE_FRAME, ge=MIN_FRAME, le=WIRE_FRAME, description="bytes a full segment occupies "
        "on an emulated link (its Ethernet frame; payload: frame - 66), set as every host "
        "route's advmss: smaller frames put more packets in the replica's pipe per modelled "
        "byte at the same queueing delay (queue floors keep their bytes), at the datapath's "
        "and the hosts' cost per packet; measured worse on the workloads, so full-size by "
        "default (docs/log/validation-notebook.md, 'Smaller frames')")
    queue_limit: Literal["packets", "bytes"] = Field(
        "packets", description="leaf queues hold queue_min_packets packets of any size, or "
        "that many full frames' worth of bytes (a switch's buffer: SYNs and ACKs fit behind "
        "data; fewer SYN losses on the probes but more unfaithful loaded runs here: README)")
    rto_min_ms: float | None = Field(
        None, gt=0, le=1000, description="minimum TCP retransmission timeout on the replica's "
        "hosts, in modelled ms (wall: x time_dilation), set on every host route (null: "
        "Linux's 200 ms, in modelled ms as ns-3 waits it: 400 wall ms at time_dilation 2)")
    capture: list[str] = Field(
        [], max_length=64, description="links whose packets every run records: 'a>b' (what "
        "a sends toward b) or 'a-b' (both ways); a pcap per direction per run under the "
        "run's capture/ (Wireshark reads it) and capture/flows.csv (emulate --capture)")
    capture_snaplen: int = Field(
        128, ge=64, le=65535, description="bytes kept of each captured packet: the headers "
        "by default (65535 keeps the KV payload too, a file the size of the traffic)")
    kv_connections: Literal["persistent", "per-shard"] = Field(
        "persistent", description="persistent: senders keep their KV connections to each "
        "receiver for the next transfer, as a serving system keeps its transport's; "
        "per-shard: a TCP connection per KV shard per transfer (a handshake, SYN and "
        "teardown each, on the replica's millisecond round trips)")
    kv_transport: Literal["pusher", "mooncake"] = Field(
        "pusher", description="what moves KV between workers: pusher, the testbed's own TCP "
        "streams (a connection per TP shard, AF41-marked by the sender); mooncake, "
        "Mooncake's Transfer Engine over TCP as SGLang's and vLLM's connectors use it (an "
        "engine per worker, P2P handshake, its sockets classified by port: kv_port + 16 to "
        "+ 31; docs/kv-transport.md)")
    tcp_congestion: Literal["cubic", "reno", "bbr", "system"] = Field(
        "cubic", description="congestion control of KV streams; loss-based cubic shares a "
        "bottleneck the way the flow model's max-min fairness assumes; the pusher sets it "
        "per socket, the hosts' routes carry it for sockets that set none (the Transfer "
        "Engine's); system: the machine's default, bbr on some")

    @field_validator("ovs_instances", mode="before")
    @classmethod
    def _auto_or_a_count(cls, v):
        """One message for both branches of the union, not one per branch."""
        if v == "auto":
            return v
        if isinstance(v, int | float) and not isinstance(v, bool) and 1 <= v <= 64 \
                and float(v).is_integer():
            return int(v)
        raise ValueError(f"expected 'auto' or a whole number of daemons from 1 to 64, "
                         f"got {v!r}")

    @field_validator("bind")
    @classmethod
    def _an_address(cls, v: str) -> str:
        try:
            ipaddress.ip_address(v)
        except ValueError:
            raise ValueError(f"{v!r} is not an IP address") from None
        return v

    @model_validator(mode="after")
    def _exposed_needs_token(self) -> EmulationCfg:
        if not ipaddress.ip_address(self.bind).is_loopback and self.token is None:
            raise ValueError(f"bind {self.bind} is not loopback: the intent endpoint and "
                             "OpenFlow would be open to that network, so set emulation.token "
                             "(16+ characters) for POST /intent, and firewall of_port")
        return self

    @property
    def dilation(self) -> Dilation:
        """Wall <-> modelled spans and rates at this time dilation."""
        return Dilation(self.time_dilation)
