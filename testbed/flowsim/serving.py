"""Serving state of the flow simulator: prefill FIFOs and continuous-batching decode.

A decode instance admits requests whose KV has landed at iteration boundaries, up to
beta_max; the first token comes at the end of the request's first iteration and the
request leaves after output_len iterations. Iterations are simulated one event each
while the batch is non-empty. Memory: KV of live requests is reserved or pinned in the
prefix cache; unpinned cached blocks are evictable and count as free.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count

from testbed.flowsim.events import EventLoop
from testbed.model.cache import PrefixCache
from testbed.model.timing import TimingModel
from testbed.workloads.requests import Request


@dataclass(eq=False)
class RequestState:
    """Everything that happens to one request; becomes one row of requests.csv."""

    req: Request
    measured: bool
    keys: list[int]
    kv_bytes: float
    prefill: str | None = None
    prefill_start: float | None = None
    prefill_end: float | None = None
    decode: str | None = None
    tier: int | None = None
    hit_tokens: int = 0
    eff_bytes: float = 0.0
    predicted_transfer_s: float | None = None
    transfer_start: float | None = None
    transfer_end: float | None = None
    flows_left: int = 0
    reserved: float = 0.0
    new_keys: list[int] = field(default_factory=list)
    admit_iter: int = 0
    entry_iter_s: float | None = None
    first_token: float | None = None
    done: float | None = None
    state: str | None = None  # completed | rejected | failed
    reason: str = ""

    def terminate(self, state: str, reason: str = "") -> None:
        if self.state is not None:
            raise RuntimeError(f"{self.req.request_id} already ended as {self.state}")
        self.state = state
        self.reason = reason


class PrefillInstance:
    """FIFO prefill: deterministic service times, so the queue is its clear time."""

    def __init__(self, name: str, timing: TimingModel):
        self.name = name
        self.timing = timing
        self.free_at = 0.0

    def enqueue(self, rs: RequestState, now: float) -> float:
        start = max(now, self.free_at)
        end = start + self.timing.prefill_time(rs.req.input_len)
        self.free_at = end
        rs.prefill, rs.prefill_start, rs.prefill_end = self.name, start, end
        return end


class DecodeInstance:
    def __init__(
        self,
        name: str,
        loop: EventLoop,
        timing: TimingModel,
        beta_max: int,
        capacity: float,
        cache: PrefixCache,
        on_complete: Callable[[RequestState], None],
    ):
        self.name = name
        self.loop = loop
        self.timing = timing
        self.beta_max = beta_max
        self.capacity = capacity
        self.cache = cache
        self.on_complete = on_complete
        self.reserved = 0.0  # bytes not (yet) held as cache blocks
        self.pending = 0  # decided, KV not landed
        self.waiting: deque[RequestState] = deque()
        self.batch: dict[int, RequestState] = {}
        self._finish: list[tuple[int, int, RequestState]] = []
        self._seq = count()
        self._just_admitted: list[RequestState] = []
        self.iter_count = 0
        self.running = False
        self.iterations = 0

    # -- what the router sees ----------------------------------------------------------
    @property
    def free_memory(self) -> float:
        return self.capacity - self.reserved - self.cache.pinned_bytes

    @property
    def queued(self) -> int:
        return self.pending + len(self.waiting)

    @property
    def batch_size(self) -> int:
        return len(self.batch)

    # -- lifecycle -------------------------------------------------------------------
    def assign(self, rs: RequestState, hit_blocks: int, output_bytes: float) -> None:
        """The scheduler chose this instance: pin the hit, reserve the rest."""
        self.pending += 1
        self.cache.pin(rs.keys[:hit_blocks])
        rs.new_keys = rs.keys[hit_blocks:]
        rs.reserved = rs.eff_bytes + output_bytes
        self.reserved += rs.reserved
        self.cache.evict_to(self.capacity - self.reserved)

    def kv_landed(self, rs: RequestState) -> None:
        self.pending -= 1
        moved = len(rs.new_keys) * self.cache.block_bytes
        moved = min(moved, rs.reserved)
        self.reserved -= moved
        rs.reserved -= moved
        self.cache.pin(rs.new_keys)
        self.cache.evict_to(self.capacity - self.reserved)
        self.waiting.append(rs)
        if not self.running:
            self._boundary(ended=False)

    def _boundary(self, ended: bool) -> None:
        now = self.loop.now
        if ended:
            self.iter_count += 1
            self.iterations += 1
            for rs in self._just_admitted:
                rs.first_token = now
            self._just_admitted = []
            while self._finish and self._finish[0][0] <= self.iter_count:
                _, _, rs = heapq.heappop(self._finish)
                self._complete(rs, now)
        while self.waiting and len(self.batch) < self.beta_max:
            rs = self.waiting.popleft()
            rs.admit_iter = self.iter_count
            self.batch[id(rs)] = rs
            heapq.heappush(self._finish, (self.iter_count + rs.req.output_len, next(self._seq), rs))
            self._just_admitted.append(rs)
        if self.batch:
            self.running = True
            t_iter = self.timing.iteration_time(len(self.batch))
            for rs in self._just_admitted:
                rs.entry_iter_s = t_iter
            self.loop.after(t_iter, lambda: self._boundary(ended=True))
        else:
            self.running = False

    def _complete(self, rs: RequestState, now: float) -> None:
        del self.batch[id(rs)]
        rs.done = now
        self.cache.unpin(rs.keys)
        self.reserved -= rs.reserved
        rs.reserved = 0.0
        rs.terminate("completed")
        self.on_complete(rs)
