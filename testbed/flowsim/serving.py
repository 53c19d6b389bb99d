"""Serving state: prefill FIFOs and continuous-batching decode, for both engines.

The flow simulator drives these classes with its discrete-event loop; the emulation's
workers drive the very same classes with a real-time loop (testbed.workers.clock), so
batching, memory and cache behave identically and only time and the network differ.

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
from itertools import count

from testbed.flowsim.events import EventLoop
from testbed.lifecycle import RequestState
from testbed.model.cache import PrefixCache, block_keys
from testbed.model.timing import TimingModel
from testbed.workloads.requests import Request


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
        on_first_token: Callable[[RequestState], None] | None = None,
    ):
        self.name = name
        self.loop = loop
        self.timing = timing
        self.beta_max = beta_max
        self.capacity = capacity
        self.cache = cache
        self.on_complete = on_complete
        self.on_first_token = on_first_token
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
        self.dead = False

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
    def prewarm(self, history: list[Request]) -> None:
        """Cache the prefixes of requests served before the run (LRU order kept)."""
        for req in history:
            keys = block_keys(req.hash_ids, req.input_len, self.cache.block_tokens)
            self.cache.pin(keys)
            self.cache.unpin(keys)
            self.cache.evict_to(self.capacity - self.reserved)

    def assign(self, rs: RequestState, hit_blocks: int, output_bytes: float) -> None:
        """The scheduler chose this instance: pin the hit, reserve the rest."""
        self.pending += 1
        self.cache.pin(rs.keys[:hit_blocks])
        rs.new_keys = rs.keys[hit_blocks:]
        rs.reserved = rs.eff_bytes + output_bytes
        self.reserved += rs.reserved
        self.cache.evict_to(self.capacity - self.reserved)

    def cancel(self, rs: RequestState) -> None:
        """The KV will never come (the transfer failed): undo `assign`."""
        self.pending -= 1
        self.cache.unpin(rs.keys[:len(rs.keys) - len(rs.new_keys)])
        self.reserved -= rs.reserved
        rs.reserved = 0.0

    def kv_landed(self, rs: RequestState) -> None:
        if self.dead:
            return  # bytes into a dead GPU: recovery deals with the request
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

    def fail(self) -> list[RequestState]:
        """The instance dies: iterations stop; return the requests it held (queued or
        in its batch). Requests still in transfer to it are the caller's to find."""
        self.dead = True
        held = list(self.waiting) + list(self.batch.values())
        self.waiting.clear()
        self.batch.clear()
        self._finish.clear()
        self._just_admitted = []
        self.running = False
        return held

    def _boundary(self, ended: bool) -> None:
        if self.dead:
            return
        now = self.loop.now
        if ended:
            self.iter_count += 1
            self.iterations += 1
            for rs in self._just_admitted:
                if rs.first_token is None:  # a recovered request keeps its first token
                    rs.first_token = now
                    if self.on_first_token is not None:
                        self.on_first_token(rs)
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
        served = {"migrate": "migrated", "recompute": "recomputed"}.get(rs.recovery, "completed")
        rs.terminate(served)
        self.on_complete(rs)
