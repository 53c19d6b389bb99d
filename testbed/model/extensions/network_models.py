"""What times a KV transfer in the flow engine: max-min sharing, a simpler model of the
kind serving simulators use, or anyone's plugin (scenario field `network.model`).

`max-min` is this project's fluid network (flowsim/network.py: progressive filling at
every arrival and completion, with the TCP terms of `network.flow_model: tcp`). The
serving simulators users cross-check model a transfer with much less: SimAI's
disaggregated path takes its size over a fixed bandwidth, inference-sim (BLIS) a base
latency plus bytes over bandwidth, optionally with a fair share. Those are the built-ins
here, so that each can be judged against packets (`testbed validate --flow-model`).

A network model is asked once, when a transfer starts: given the transfer (bytes,
shards, tier, paths, start) and the flows in flight that share a link with it, it returns
the seconds from the transfer's start to its last byte in. Its shards then send at
constant rates and end together, never re-timed (flowsim/model_network.py); after the
last byte the flow engine adds, for every model alike, the tier's one-way latency and the
send calls' overhead. A model sees no priority levels, faults or background traffic
unless it reads them from what it is given.

Found like scheduler plugins (model/extensions/plugins.py): a built-in key, an installed package's
entry point in the group `netkv_testbed.network_models`, or 'module:Class'; built as
`Class(ctx)`; a plugin runs behind a guard: a raise, a return that is not a finite
positive number of seconds, or a call past the scenario's `scheduler_timeout_ms` is
counted (summary.json `network_model_faults`) and the transfer is timed by
fixed-bandwidth instead.
"""

from __future__ import annotations

import functools
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata

from testbed.model.extensions.guard import BAD_RETURN, RAISED, TOO_SLOW, Deadline, Overtime
from testbed.model.extensions.plugins import PluginError, load_class, target_of
from testbed.model.tcp import TcpParams

MAX_MIN = "max-min"
ENTRY_POINT_GROUP = "netkv_testbed.network_models"
FAULT_KINDS = (RAISED, BAD_RETURN, TOO_SLOW)


@dataclass(frozen=True)
class Link:
    """One directed link a transfer crosses: "a>b", its tier, bytes/s as calibrated."""

    name: str
    tier: int
    capacity: float


@dataclass(frozen=True)
class Transfer:
    """A transfer as it starts: bytes of all its shards, how many shards (parallel
    streams), its tier, the tier's bandwidth (bytes/s, as calibrated) and one-way latency,
    its path's base round trip, each shard stream's path, and its start (seconds)."""

    bytes: float
    shards: int
    tier: int
    bandwidth: float
    latency_s: float
    rtt_s: float
    paths: tuple[tuple[Link, ...], ...]
    start: float


@dataclass(frozen=True)
class SharedFlow:
    """A flow in flight on one of the transfer's links: which transfer it belongs to (a
    number, the same for its shards), its bytes left, its rate now (bytes/s), its links."""

    transfer: int
    bytes_left: float
    rate: float
    links: tuple[Link, ...]
    start: float


@dataclass(frozen=True)
class NetworkModelContext:
    """What a model may know of the run: the fabric's tiers (bytes/s as calibrated, one-way
    seconds) and the scenario's TCP terms (None without `network.flow_model: tcp`)."""

    tier_bandwidth: dict[int, float]
    tier_latency_s: dict[int, float]
    tcp: TcpParams | None = None


class NetworkModel:
    """Base of every network model: implement transfer_time()."""

    name = "base"

    def __init__(self, ctx: NetworkModelContext):
        self.ctx = ctx

    def transfer_time(self, transfer: Transfer, sharing: Sequence[SharedFlow]) -> float:
        """Seconds from the transfer's start to its last byte in."""
        raise NotImplementedError


def fair_bandwidth(transfer: Transfer, sharing: Sequence[SharedFlow]) -> float:
    """The tier's bandwidth split equally among the transfers on the transfer's most
    shared link, as they are at its start (a static fair share: never re-shared)."""
    on_link: dict[str, set[int]] = {}
    for flow in sharing:
        for link in flow.links:
            on_link.setdefault(link.name, set()).add(flow.transfer)
    own = {link.name for path in transfer.paths for link in path}
    others = max((len(on_link.get(name, ())) for name in own), default=0)
    return transfer.bandwidth / (1 + others)


def base_latency(transfer: Transfer, tcp: TcpParams | None) -> float:
    """A connection's fixed cost: its handshake and tail round trips under the scenario's
    TCP terms (as the TCP model charges a lone transfer), one round trip without them."""
    if tcp is None:
        return transfer.rtt_s
    return (tcp.handshake_rtts + tcp.tail_rtts) * transfer.rtt_s


class FixedBandwidth(NetworkModel):
    """Size over the tier's bandwidth, whatever else is on the links (SimAI's)."""

    name = "fixed-bandwidth"
    fair = False
    latency = False

    def transfer_time(self, transfer: Transfer, sharing: Sequence[SharedFlow]) -> float:
        bandwidth = fair_bandwidth(transfer, sharing) if self.fair else transfer.bandwidth
        base = base_latency(transfer, self.ctx.tcp) if self.latency else 0.0
        return base + transfer.bytes / bandwidth


class FixedBandwidthFair(FixedBandwidth):
    """Size over the tier's bandwidth shared equally on the most shared link at start."""

    name = "fixed-bandwidth-fair"
    fair = True


class LatencyBandwidth(FixedBandwidth):
    """A base latency (the connection's round trips) plus bytes over bandwidth (BLIS's)."""

    name = "latency-bandwidth"
    latency = True


class LatencyBandwidthFair(LatencyBandwidth):
    """latency-bandwidth with the static fair share of fixed-bandwidth-fair."""

    name = "latency-bandwidth-fair"
    fair = True


BUILTINS: dict[str, type[NetworkModel]] = {
    cls.name: cls for cls in (FixedBandwidth, FixedBandwidthFair, LatencyBandwidth,
                              LatencyBandwidthFair)}
SIMPLE = tuple(BUILTINS)  # the four built-in simple models, in the tables' order


def entry_points() -> dict[str, str]:
    """Installed network-model plugins: entry-point name -> "module:Class"."""
    return {ep.name: ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def known() -> dict[str, tuple[str, str]]:
    """Every key `network.model` may take now: key -> (what it does, where it is from)."""
    out = {MAX_MIN: ("Max-min fair sharing re-solved at every arrival and completion "
                     "(with the TCP terms when on).", "built-in")}
    out.update({key: (cls.__doc__.splitlines()[0], "built-in") for key, cls in BUILTINS.items()})
    for name, target in entry_points().items():
        out.setdefault(name, (display_name(name), f"entry point -> {target}"))
    return out


@functools.lru_cache(maxsize=64)
def resolve(key: str) -> tuple[type[NetworkModel], str]:
    """The class `key` names and where it came from; PluginError says why not. max-min is
    no class (it is the fluid network itself): ask is_max_min first."""
    if key in BUILTINS:
        return BUILTINS[key], "built-in"
    found = target_of(key, entry_points())
    if found is None:
        raise PluginError(f"unknown network model {key!r}; choose from "
                          f"{', '.join(known())}, or name a plugin as 'module:Class' "
                          "(docs/schedulers.md#network-models)")
    target, origin = found
    cls = load_class(target, f"network model {origin!r}", NetworkModel,
                     "a network model class (subclass testbed.NetworkModel and implement "
                     "transfer_time(); docs/schedulers.md#network-models)")
    if cls.transfer_time is NetworkModel.transfer_time:
        raise PluginError(f"network model {origin!r}: it does not implement transfer_time()")
    return cls, origin


def is_max_min(key: str) -> bool:
    return key == MAX_MIN


def display_name(key: str) -> str:
    """A model's name in tables: its key, or a plugin class's `name`; never raises."""
    if key == MAX_MIN or key in BUILTINS:
        return key
    try:
        cls, _ = resolve(key)
    except PluginError:
        return key
    return str(cls.__dict__.get("name") or key)


@dataclass
class GuardedModel:
    """A plugin model behind the guard: what goes wrong is counted, and the transfer is
    timed by fixed-bandwidth instead."""

    key: str
    inner: NetworkModel
    timeout_s: float
    fallback: NetworkModel
    counts: Counter = field(default_factory=Counter)
    last_fault: str = ""

    def transfer_time(self, transfer: Transfer, sharing: Sequence[SharedFlow]) -> float:
        t0 = time.perf_counter()
        kind, seconds = None, None
        try:
            with Deadline(self.timeout_s):
                seconds = self.inner.transfer_time(transfer, sharing)
        except Overtime:
            kind, detail = TOO_SLOW, f"still timing after {self.timeout_s * 1e3:g} ms"
        except Exception as exc:  # noqa: BLE001 - the plugin's error, counted by name
            kind, detail = RAISED, f"{type(exc).__name__}: {exc}"
        if kind is None and time.perf_counter() - t0 > self.timeout_s:
            kind, detail = TOO_SLOW, f"took over {self.timeout_s * 1e3:g} ms"
        if kind is None and not _good_seconds(seconds):
            kind, detail = BAD_RETURN, (f"returned {str(seconds)[:40]}, not a finite "
                                        "number > 0 that a float holds")
        if kind is None:
            return float(seconds)
        self.counts[kind] += 1
        self.last_fault = f"{self.key} {kind}: {detail}"
        return self.fallback.transfer_time(transfer, sharing)

    def report(self) -> dict[str, int]:
        return {"total": sum(self.counts.values()),
                **{k: self.counts.get(k, 0) for k in FAULT_KINDS}}


def _good_seconds(value) -> bool:
    """A finite number of seconds above zero that a float holds (an int past 1e308 not)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value)) and value > 0
    except OverflowError:
        return False


def build(key: str, ctx: NetworkModelContext, timeout_s: float) -> NetworkModel | GuardedModel:
    """The model `key` names, built on `ctx`; a plugin behind the guard (built-ins are
    trusted: their results are this project's)."""
    cls, origin = resolve(key)
    if origin == "built-in":
        return cls(ctx)
    try:
        inner = cls(ctx)
    except Exception as exc:  # noqa: BLE001 - the plugin's constructor, reported by name
        raise PluginError(f"network model {origin!r}: building it raised "
                          f"{type(exc).__name__}: {exc}") from None
    return GuardedModel(key, inner, timeout_s, FixedBandwidth(ctx))
