"""Traffic classes: DSCP code points, their HTB classes and shares. One table for all.

| class      | DSCP       | TOS byte | HTB class | guaranteed share | priority |
| ---------- | ---------- | -------- | --------- | ---------------- | -------- |
| control    | CS6 (48)   | 0xc0     | 1:10      | 5%               | 0 (first)|
| kv         | AF41 (34)  | 0x88     | 1:20      | 60%              | 1        |
| background | BE (0)     | 0x00     | 1:30      | 35%              | 2        |

Every class may borrow up to the link rate (ceil = rate), so an idle class costs
nothing. Unknown DSCP values fall into background (the HTB default class). KV flows keep
AF41 end to end, which is what lets the controller's congestion figure exclude them.
"""

from __future__ import annotations

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


def class_of_dscp(dscp: int) -> TrafficClass:
    for c in CLASSES:
        if c.dscp == dscp:
            return c
    return DEFAULT_CLASS
