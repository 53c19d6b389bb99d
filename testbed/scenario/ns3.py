"""The ns-3 engine (`simulate --engine ns3`): the replica it simulates and its transport.

Everything else it takes from the sections the emulation reads (emulation.frame_bytes,
queue_min_packets, queue_limit, kv_connections, rto_min_ms, tcp_congestion), so that the
two packet engines run the same replica unless told otherwise.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from testbed.scenario.base import _Strict

TWIN_BEHAVIOURS = ("tsq", "restart", "rto", "tlp", "rack", "framing", "remark", "frames", "htb")
TwinBehaviour = Literal["tsq", "restart", "rto", "tlp", "rack", "framing", "remark", "frames",
                        "htb"]


class RoceCfg(_Strict):
    """RoCE's parts (`ns3.transport: roce`): DCQCN (Zhu et al., SIGCOMM 2015, whose
    defaults these are at 40 Gbit/s unless said), RED marking, PFC and go-back-N, as on
    the real fabric: rates scale with the replica, times as `timers` says (docs/ns3.md)."""

    timers: Literal["scaled", "absolute"] = Field(
        "scaled", description="scaled: every time below is the real fabric's, 1/ns3.scale "
        "longer on the replica (whose rates are ns3.scale of the real ones), byte counts "
        "as given: DCQCN and PFC as on the real fabric in slowed time. absolute: the times "
        "as given, the byte counter scaled: the real timers beside the replica's longer "
        "frames")
    mtu_bytes: int = Field(1000, ge=256, le=4096, description="payload bytes per packet "
                           "(the common ns-3 RDMA setups' 1000)")
    kmin_kb: float = Field(5.0, gt=0, description="RED: KV bytes queued at an egress "
                           "above which packets are marked CE, in KB (1000 bytes)")
    kmax_kb: float = Field(200.0, gt=0, description="RED: above it every KV packet is marked")
    pmax: float = Field(0.01, gt=0, le=1, description="RED: the marking probability at Kmax")
    g: float = Field(1 / 256, gt=0, lt=1, description="DCQCN's alpha gain")
    cnp_interval_us: float = Field(50.0, gt=0, description="a receiver sends one CNP per "
                                   "flow at most this often")
    alpha_timer_us: float = Field(55.0, gt=0, description="alpha decays by (1-g) after this "
                                  "long without a CNP")
    rate_timer_us: float = Field(55.0, gt=0, description="the rate-increase timer")
    byte_counter_mb: float = Field(10.0, gt=0, description="bytes sent between rate-increase "
                                   "events, in MB (times ns3.scale under timers: absolute)")
    fast_recovery: int = Field(5, ge=0, le=100, description="F: increase events spent "
                                "halving the distance to the target rate")
    rai_mbps: float = Field(40.0, gt=0, description="additive increase per event (scaled)")
    rhai_mbps: float = Field(200.0, gt=0, description="hyper increase per event (scaled; the "
                             "paper's authors' ns-3 configuration)")
    min_rate_mbps: float = Field(100.0, gt=0, description="no cut goes below it (scaled; "
                                 "HPCC's ns-3 setups)")
    ack_every: int = Field(1, ge=1, le=1024, description="the receiver ACKs every this many "
                           "in-order packets and the last")
    nak_interval_us: float = Field(500.0, gt=0, description="one NAK per expected PSN at most "
                                   "this often (HPCC's ns-3 setups)")
    timeout_ms: float = Field(67.108864, gt=0, description="go-back-N's retransmission "
                              "timeout where no NAK can come: 4.096 us x 2^14, perftest's "
                              "local ACK timeout")
    pfc_xoff_kb: float = Field(256.0, gt=0, description="PFC: KV bytes a switch holds from "
                               "one ingress above which it pauses the sender's KV class")
    pfc_resume_kb: float = Field(3.0, gt=0, description="PFC: resume once that ingress is "
                                 "this far below Xoff (HPCC's ns-3 setups' 3 KiB)")
    watchdog_ms: float = Field(200.0, gt=0, description="a queue paused this long without a "
                               "resume trips the PFC watchdog (SONiC's default): it drops "
                               "what the queue holds, ignores pauses for restore_ms and "
                               "the run names it")
    restore_ms: float = Field(200.0, gt=0, description="how long a tripped queue ignores "
                              "pauses")

    @field_validator("kmax_kb")
    @classmethod
    def _above_kmin(cls, v: float, info) -> float:
        if v <= info.data.get("kmin_kb", 0):
            raise ValueError(f"kmax_kb {v} must be above kmin_kb {info.data.get('kmin_kb')}")
        return v


class Ns3Cfg(_Strict):
    scale: float | None = Field(
        None, gt=0, le=1, description="multiplies every bandwidth and KV byte count, as the "
        "emulation's replica does (1: the modelled line rates, which cost 1/scale times "
        "more packets); null: emulation.scale, the emulation's own replica")
    transport: Literal["auto", "cubic", "newreno", "bbr", "dctcp", "roce"] = Field(
        "auto", description="TCP of the KV and background streams. auto: "
        "emulation.tcp_congestion (cubic, Linux's default, for 'system'); dctcp marks ECN "
        "at every egress's KV queue (ecn_k_packets); roce: the paper's lossless fabric, "
        "KV shards as RDMA writes under DCQCN with PFC for the KV class (ns3.roce), "
        "background on the emulation's TCP in its own lossy class; ns-3 only")
    roce: RoceCfg = Field(default_factory=RoceCfg, description="RoCE's parameters "
                          "(transport roce)")
    ecn_k_packets: int | None = Field(
        None, ge=1, le=100_000, description="DCTCP's marking threshold: KV packets queued "
        "on an egress above which arrivals are marked CE (null: a quarter of the shortest "
        "queue, at least 2)")
    socket_buffer_bytes: int | None = Field(
        None, ge=4096, le=2**30, description="send and receive buffer of every stream "
        "(null: four of the fastest NIC's 50 ms queues, at least 128 KiB, at most 64 MiB; "
        "a larger one costs the sender's SACK scoreboard time)")
    rto_min_ms: float | None = Field(
        None, gt=0, le=1000, description="minimum TCP retransmission timeout, in modelled "
        "ms (null: the emulation's, emulation.rto_min_ms, else Linux's 200 ms, which the "
        "emulation waits in modelled ms too); a floor under the delayed-ACK timer makes a "
        "one-segment window wait out a spurious timeout: pair it with delayed_ack_ms: 0, "
        "as datacenters pair rto_min with quickack")
    delayed_ack_ms: float | None = Field(
        None, ge=0, le=500, description="delayed-ACK timeout in modelled ms (null: Linux's "
        "40 ms / twin_dilation, ns-3's own default being 200)")
    start_jitter_us: float = Field(
        0.0, ge=0, le=1e6, description="each KV shard's stream starts up to this many "
        "modelled microseconds after the control plane sends it (uniform, drawn per shard "
        "from jitter_seed; 0: at once): a perturbation no flow model resolves. validate "
        "--packets ns3 --repeats N runs the first seed N more times with one frame's time "
        "on the fastest link of it, to measure how far packets move under it (the floor of "
        "any model's per-transfer error)")
    jitter_seed: int = Field(0, ge=0, le=2**31, description="which draw of start_jitter_us's "
                             "delays (the same seed gives the same delays)")
    twin: list[TwinBehaviour] = Field(
        [b for b in TWIN_BEHAVIOURS if b != "htb"],
        description="what the emulation's Linux hosts, workers and shaping do that ns-3's "
        "stock parts do not, modelled in the ns-3 program (docs/ns3.md): tsq (a socket "
        "holds its backlog: no loss at its own NIC), restart (slow start again after an "
        "idle RTO), rto (srtt + max(rto_min, mdev)), tlp (tail loss probe), rack (a hole, "
        "or a retransmission, is lost once a later segment is delivered), framing (a "
        "header before each shard, the receiver's one-byte reply ends it), remark "
        "(receivers' ACKs best effort until the ToR marks them AF41), frames (a full segment "
        "takes the emulation's Ethernet frame's time on a link: ns-3's is 26 bytes "
        "shorter), htb (links shaped as "
        "HTB shapes a veth: a frame's tokens, not its serialisation, pace it, and the "
        "emulation's Ethernet frame is what is counted; off by default: without the "
        "emulation's per-hop and host costs, which ns-3 does not model, a one-segment "
        "transfer crosses 20x faster than on the emulation); [] is ns-3's stock parts")
    twin_dilation: float = Field(
        1.0, ge=1, le=1000, description="the kernel's wall-time constants (delayed ACK 40 "
        "ms, the tail loss probe's 2-jiffy floor, TSQ's millisecond of pacing) as an "
        "emulation at this time dilation has them in modelled time: 1 is Linux's own; ns-3's "
        "twin of an emulation's runs takes their emulation.time_dilation")

    @field_validator("twin")
    @classmethod
    def _each_once(cls, v: list) -> list:
        if len(set(v)) != len(v):
            raise ValueError(f"a behaviour named twice: {v}")
        return v
