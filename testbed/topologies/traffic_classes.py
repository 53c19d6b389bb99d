"""Traffic classes: DSCP code points, their HTB classes and shares. One table for all.

| class      | DSCP       | TOS byte | HTB class | guaranteed share | priority |
| ---------- | ---------- | -------- | --------- | ---------------- | -------- |
| control    | CS6 (48)   | 0xc0     | 1:10      | 5%               | 0 (first)|
| kv         | AF41 (34)  | 0x88     | 1:20      | 60%              | 1        |
| background | BE (0)     | 0x00     | 1:30      | 35%              | 2        |

Every class may borrow up to the link rate (ceil = rate), so an idle class costs
nothing.

Priority levels of KV flows (MFS and its baselines, testbed/model/mfs.py). With
a non-fair flow policy the kv class becomes an inner HTB class whose leaves are the K
levels plus a scavenger level below them: level k is DSCP 16 + k (CS2 upwards; the
scavenger is DSCP 8, CS1, "lower effort"), HTB class 1:<0x21 + k>, prio k. This kernel
has no prio qdisc, so HTB approximates strict priority: each level is guaranteed only
LEVEL_SHARE of the kv class and may borrow up to the link rate, and HTB lends spare
rate to the lowest prio value first. AF41 (unlevelled KV, e.g. the receiver's ACKs)
goes to level 0. Unknown DSCP values fall into background (the HTB default class). KV flows keep
AF41 end to end, which is what lets the controller's congestion figure exclude them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class TrafficClass:
    name: str
    dscp: int
    classid_minor: int  # HTB class 1:<minor>
    share: float  # guaranteed fraction of the link rate
    prio: int

    @property
    def tos(self) -> int:
        """The IPv4 TOS byte senders set (DSCP in the upper six bits)."""
        return self.dscp << 2


CONTROL = TrafficClass("control", 48, 0x10, 0.05, 0)
KV = TrafficClass("kv", 34, 0x20, 0.60, 1)
BACKGROUND = TrafficClass("background", 0, 0x30, 0.35, 2)
CLASSES = (CONTROL, KV, BACKGROUND)
DEFAULT_CLASS = BACKGROUND
BY_NAME = {c.name: c for c in CLASSES}


MAX_LEVELS = 8
LEVEL_DSCP_BASE = 16
SCAVENGER_DSCP = 8
LEVEL_SHARE = 0.01  # guaranteed fraction of the kv class per level (strict: 0)


def level_dscp(level: int, levels: int) -> int:
    """DSCP of KV priority level `level` (0 first; `levels` is the scavenger)."""
    if not 0 <= level <= levels <= MAX_LEVELS:
        raise ValueError(f"level {level} outside 0..{levels} (at most {MAX_LEVELS} levels)")
    return SCAVENGER_DSCP if level == levels else LEVEL_DSCP_BASE + level


def level_tos(level: int, levels: int) -> int:
    return level_dscp(level, levels) << 2


def level_minor(level: int) -> int:
    """HTB class minor of a level's leaf under the kv class (the scavenger is level K)."""
    return KV.classid_minor + 1 + level


def trusted_level_dscps() -> list[int]:
    """Every DSCP a KV sender may set for a level: the controller trusts them all."""
    return [LEVEL_DSCP_BASE + k for k in range(MAX_LEVELS)] + [SCAVENGER_DSCP]


def class_of_dscp(dscp: int) -> TrafficClass:
    for c in CLASSES:
        if c.dscp == dscp:
            return c
    return DEFAULT_CLASS


# Mooncake's Transfer Engine picks its handshake and data ports at random within
# MC_MIN_RPC_PORT..MC_MAX_RPC_PORT and sets no DSCP, so the fabric classifies a fixed block
# of ports as KV, as the controller classifies the pusher's kv_port. A block, not a pair:
# a run's ports stay in TIME_WAIT for a minute after its engines exit, and the engine
# binds without SO_REUSEADDR, so the next run on the same fabric takes two others.
ENGINE_PORT_OFFSET = 16
ENGINE_PORTS = 16


def engine_ports(kv_port: int) -> tuple[int, ...]:
    """The Transfer Engine's ports on every host (emulation.kv_transport: mooncake)."""
    return tuple(range(kv_port + ENGINE_PORT_OFFSET, kv_port + ENGINE_PORT_OFFSET + ENGINE_PORTS))


# The engine's pool (MC_TCP_ENABLE_CONNECTION_POOL) keeps this many connections per peer,
# its lanes (MC_TCP_LANES_PER_PEER, the workers set it): every write to that peer takes the
# first idle lane in the order they opened, or waits first come first served for one; a
# lane is busy until the target's status frame for its write returns.
ENGINE_LANES = 4


def kv_lanes(transport: str, connections: str) -> int:
    """Connections a sender shares among all its shards to one receiver, waiting for one
    when all are busy (the engine's lanes); 0: a connection per shard index, another
    opened when it is busy (the pusher's pool), or per write without a pool."""
    return ENGINE_LANES if transport == "mooncake" and connections == "persistent" else 0


def engine_notice(request: str, stage: str, start: float, shards: list[list[int]]) -> bytes:
    """The line a prefill worker sends its target once the engine's writes of a transfer
    completed (kept connection, KV class): the decode side lands the transfer on its
    arrival. ns-3 sends a message of its size at the same instant."""
    note = {"request": request, "stage": stage, "start": start, "shards": shards}
    return (json.dumps(note) + "\n").encode()


def engine_notice_bytes(shards: int) -> int:
    """A notice's size for a transfer of `shards` shards, as the workers write it (a
    request id of the workloads' length, a wall clock's digits, shards of a replica's MB)."""
    return len(engine_notice("r1234", "p2d", 1.7e9 + 0.123456,
                             [[k, 10**6] for k in range(shards)]))


def engine_ports_usable(kv_port: int) -> bool:
    """Whether the engine accepts the block: it refuses ports below 1024 and Linux's
    ephemeral range (32768-60999), falling back to its default range unclassified."""
    ports = engine_ports(kv_port)
    return all(1024 <= p <= 65535 and not 32768 <= p <= 60999 for p in ports)


def kv_ports(kv_port: int, transport: str) -> tuple[int, ...]:
    """Every TCP port whose traffic is KV: the pusher's, and the engine's when it runs."""
    return (kv_port, *engine_ports(kv_port)) if transport == "mooncake" else (kv_port,)
