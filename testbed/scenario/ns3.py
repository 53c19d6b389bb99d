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


class Ns3Cfg(_Strict):
    scale: float | None = Field(
        None, gt=0, le=1, description="multiplies every bandwidth and KV byte count, as the "
        "emulation's replica does (1: the modelled line rates, which cost 1/scale times "
        "more packets); null: emulation.scale, the emulation's own replica")
    transport: Literal["auto", "cubic", "newreno", "bbr", "dctcp"] = Field(
        "auto", description="TCP of the KV and background streams. auto: "
        "emulation.tcp_congestion (cubic, Linux's default, for 'system'); dctcp marks ECN "
        "at every egress's KV queue (ecn_k_packets): the datacenter regime nearest the "
        "paper's RoCE with DCQCN (ns-3 has neither DCQCN nor PFC)")
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
