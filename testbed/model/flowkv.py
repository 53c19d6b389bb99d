"""FlowKV's Load-Aware Scheduler (arXiv 2504.03775, s3.4 and appendix B): pure.

Per node, a state vector S_i (running / waiting / swapped / sending queue lengths of the
prefill and decode sides, token budget, KV utilisation, GPU utilisation, memory-bandwidth
utilisation), smoothed over a sliding window and normalised to [0, 1], gives the load
scores C_i^p and C_i^d as weighted sums; the cluster scores C^p and C^d are their means
over the prefill and decode pools. Three regimes:

- normal (both under their low thresholds): place each request on the prefill node with
  the smallest expected TTFT, then the decode node with the smallest transfer latency
  from it (the engines use the oracle's cost model for that latency);
- imbalanced (both under their high thresholds, not normal): nodes of the lightly loaded
  role whose own score is under `idle` switch role for `switch_cycles` cycles, or until
  the controller sees normal load again;
- extreme (either over its high threshold): the cluster needs scaling; reported, and in
  the flow simulator the same role switching is the only remedy applied.

The paper publishes no weights, normalisers or thresholds; ours are below, documented
and scenario parameters (`flowkv:`), tuned by grid search on a trace window disjoint
from the measurement window (scenarios/tune-flowkv.yaml).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# One side of a node's state (raw, before normalisation).
QUEUE_FIELDS = ("running", "waiting", "swapped", "sending")
SHARED_FIELDS = ("token_budget", "kv_util", "gpu_util", "mem_bw_util")

NORMAL, IMBALANCED, EXTREME = "normal", "imbalanced", "extreme"


@dataclass(frozen=True)
class NodeState:
    """One sample of one node; utilisations already in [0, 1], queues as counts."""

    prefill: Mapping[str, float] = field(default_factory=dict)  # QUEUE_FIELDS
    decode: Mapping[str, float] = field(default_factory=dict)  # QUEUE_FIELDS
    token_budget: float = 0.0  # queued prefill tokens / the node's token budget
    kv_util: float = 0.0
    gpu_util: float = 0.0
    mem_bw_util: float = 0.0


@dataclass(frozen=True)
class Weights:
    """w for C = sum w_k x normalised S_k, one set per role; each sums to 1 (our choice)."""

    running: float
    waiting: float
    swapped: float
    sending: float
    token_budget: float
    kv_util: float
    gpu_util: float
    mem_bw_util: float


# Prefill load is queueing and compute; decode load is batch occupancy and KV memory.
PREFILL_WEIGHTS = Weights(running=0.15, waiting=0.35, swapped=0.0, sending=0.1,
                          token_budget=0.15, kv_util=0.0, gpu_util=0.25, mem_bw_util=0.0)
DECODE_WEIGHTS = Weights(running=0.3, waiting=0.2, swapped=0.0, sending=0.0,
                         token_budget=0.0, kv_util=0.25, gpu_util=0.0, mem_bw_util=0.25)
# Queue lengths at which a queue counts as full (normalised to 1).
QUEUE_CAPS = {"running": 1.0, "waiting": 4.0, "swapped": 4.0, "sending": 4.0}


def prefill_node_state(busy: bool, waiting: int, sending: int, queued_tokens: int,
                       token_budget: int) -> NodeState:
    """A prefill node's sample as both engines see it (no swapping in this model)."""
    b = 1.0 if busy else 0.0
    return NodeState(prefill={"running": b, "waiting": waiting, "sending": sending},
                     token_budget=min(1.0, queued_tokens / token_budget), gpu_util=b)


def decode_node_state(batch: int, beta_max: int, queued: int, free_memory: float,
                      capacity: float) -> NodeState:
    """A decode node's sample: batch occupancy stands for the memory-bandwidth load of
    its iterations (decode is bandwidth-bound)."""
    occupancy = batch / beta_max
    return NodeState(decode={"running": occupancy, "waiting": queued},
                     kv_util=min(1.0, max(0.0, 1.0 - free_memory / capacity)),
                     gpu_util=1.0 if batch else 0.0, mem_bw_util=occupancy)


def fastest_prefill(targets, tokens: int, now: float):
    """Normal regime: the prefill queue (PrefillInstance-like: expected_end, name) that
    would finish a request of `tokens` first, i.e. the smallest expected TTFT."""
    return min(targets, key=lambda p: (p.expected_end(tokens, now), p.name))


def normalise(side: Mapping[str, float], caps: Mapping[str, float] = QUEUE_CAPS
              ) -> dict[str, float]:
    return {k: min(1.0, max(0.0, side.get(k, 0.0) / caps[k])) for k in QUEUE_FIELDS}


def load_score(state: NodeState, role: str, weights: Weights | None = None,
               caps: Mapping[str, float] = QUEUE_CAPS) -> float:
    """C_i^p (role "prefill") or C_i^d (role "decode") of one (smoothed) state."""
    w = weights or (PREFILL_WEIGHTS if role == "prefill" else DECODE_WEIGHTS)
    queues = normalise(state.prefill if role == "prefill" else state.decode, caps)
    return (sum(getattr(w, k) * queues[k] for k in QUEUE_FIELDS)
            + w.token_budget * state.token_budget + w.kv_util * state.kv_util
            + w.gpu_util * state.gpu_util + w.mem_bw_util * state.mem_bw_util)


def cluster_score(scores: Iterable[float]) -> float:
    """C^p = mean of C_i^p over the prefill pool (C^d likewise); 0 for an empty pool."""
    xs = list(scores)
    return sum(xs) / len(xs) if xs else 0.0


@dataclass(frozen=True)
class Thresholds:
    prefill_low: float = 0.05  # tuned on a disjoint trace window (tune-flowkv.yaml)
    prefill_high: float = 0.9
    decode_low: float = 0.5
    decode_high: float = 0.9
    idle: float = 0.15  # a node under this may take the other role


def regime(c_p: float, c_d: float, th: Thresholds = Thresholds()) -> str:
    if c_p <= th.prefill_low and c_d <= th.decode_low:
        return NORMAL
    if c_p <= th.prefill_high and c_d <= th.decode_high:
        return IMBALANCED
    return EXTREME


class SlidingWindow:
    """Mean of the samples of the last `window_s` seconds: GPU load is bursty."""

    def __init__(self, window_s: float):
        if window_s <= 0:
            raise ValueError("window_s must be positive")
        self.window_s = window_s
        self._samples: deque[tuple[float, NodeState]] = deque()

    def add(self, t: float, state: NodeState) -> None:
        self._samples.append((t, state))
        while self._samples and self._samples[0][0] < t - self.window_s:
            self._samples.popleft()

    def mean(self) -> NodeState:
        if not self._samples:
            return NodeState()
        states = [s for _, s in self._samples]
        n = len(states)

        def side(name: str) -> dict[str, float]:
            return {k: sum(getattr(s, name).get(k, 0.0) for s in states) / n
                    for k in QUEUE_FIELDS}

        return NodeState(prefill=side("prefill"), decode=side("decode"),
                         **{k: sum(getattr(s, k) for s in states) / n for k in SHARED_FIELDS})


@dataclass(frozen=True)
class Plan:
    """One controller cycle's verdict."""

    regime: str
    c_p: float
    c_d: float
    to_prefill: tuple[str, ...] = ()  # decode nodes that switch to prefill work
    to_decode: tuple[str, ...] = ()  # prefill nodes that switch to decode work
    stop: bool = False  # normal load again: every switched node goes back
    scale_hint: str = ""  # extreme: which role needs more nodes (or fewer)


def plan_cycle(prefill_scores: Mapping[str, float], decode_scores: Mapping[str, float],
               th: Thresholds = Thresholds(), max_switch: int | None = None) -> Plan:
    """What the global controller decides this cycle (Algorithm 1, lines 16-31)."""
    c_p, c_d = cluster_score(prefill_scores.values()), cluster_score(decode_scores.values())
    r = regime(c_p, c_d, th)
    if r == NORMAL:
        return Plan(r, c_p, c_d, stop=True)
    to_prefill: tuple[str, ...] = ()
    to_decode: tuple[str, ...] = ()
    if c_p - th.prefill_low >= c_d - th.decode_low:  # prefill is the hotter side
        to_prefill = tuple(sorted((n for n, s in decode_scores.items() if s < th.idle),
                                  key=lambda n: (decode_scores[n], n)))
    else:
        to_decode = tuple(sorted((n for n, s in prefill_scores.items() if s < th.idle),
                                 key=lambda n: (prefill_scores[n], n)))
    if max_switch is not None:
        to_prefill, to_decode = to_prefill[:max_switch], to_decode[:max_switch]
    hint = ""
    if r == EXTREME:
        hot = [role for role, c, hi in (("prefill", c_p, th.prefill_high),
                                        ("decode", c_d, th.decode_high)) if c > hi]
        hint = f"scale up: {' and '.join(hot)} over the high threshold"
    return Plan(r, c_p, c_d, to_prefill, to_decode, scale_hint=hint)


class RoleSwitches:
    """Which nodes serve the other role, for how many more cycles (the lifecycle)."""

    def __init__(self, cycles: int):
        if cycles < 1:
            raise ValueError("a switch lasts at least one cycle")
        self.cycles = cycles
        self.left: dict[str, int] = {}  # node -> cycles left in its switched role
        self.log: list[tuple[str, str]] = []  # (node, "switch" | "return")

    def apply(self, plan: Plan, switchable: Iterable[str]) -> tuple[list[str], list[str]]:
        """Advance one cycle; returns (nodes that switch now, nodes that return now)."""
        ok = set(switchable)
        back = []
        for node in sorted(self.left):
            self.left[node] -= 1
            if plan.stop or self.left[node] <= 0:
                back.append(node)
        for node in back:
            del self.left[node]
            self.log.append((node, "return"))
        new = []
        if not plan.stop:
            for node in (*plan.to_prefill, *plan.to_decode):
                if node in ok and node not in self.left and node not in back:
                    self.left[node] = self.cycles
                    new.append(node)
                    self.log.append((node, "switch"))
                elif node in self.left:
                    self.left[node] = self.cycles  # still idle: renewed
        return new, back

    @property
    def active(self) -> set[str]:
        return set(self.left)


class Controller:
    """The global controller's state across cycles, for either engine: each cycle the
    engine hands in one sample per node; the controller smooths, scores, plans and
    advances the role switches."""

    def __init__(self, prefill: Iterable[str], decode: Iterable[str], window_s: float,
                 switch_cycles: int, th: Thresholds, max_switch: int | None = None):
        self.prefill, self.decode = list(prefill), list(decode)
        self.windows = {n: SlidingWindow(window_s) for n in (*self.prefill, *self.decode)}
        self.switches = RoleSwitches(switch_cycles)
        self.th, self.max_switch = th, max_switch
        self.regimes: dict[str, int] = {}
        self.scale_hints = 0

    def step(self, now: float, samples: Mapping[str, NodeState], live: Iterable[str],
             switchable: Iterable[str] | None = None) -> tuple[list[str], list[str]]:
        """One cycle: (nodes that take the other role now, nodes that return to theirs).
        `live`: decode nodes alive; `switchable`: the nodes the engine can switch
        (default: the live decode nodes)."""
        for name, state in samples.items():
            self.windows[name].add(now, state)
        alive = set(live)
        live = [n for n in self.decode if n in alive]
        p = {n: load_score(self.windows[n].mean(), "prefill") for n in self.prefill}
        d = {n: load_score(self.windows[n].mean(), "decode") for n in live}
        plan = plan_cycle(p, d, self.th, self.max_switch)
        self.regimes[plan.regime] = self.regimes.get(plan.regime, 0) + 1
        self.scale_hints += bool(plan.scale_hint)
        return self.switches.apply(plan, live if switchable is None else switchable)

    def counters(self) -> dict:
        return {"flowkv_regimes": dict(self.regimes),
                "role_switches": sum(1 for _, e in self.switches.log if e == "switch"),
                "scale_hints": self.scale_hints}
