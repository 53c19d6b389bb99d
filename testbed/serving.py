"""Serving state: prefill FIFOs and continuous-batching decode, for both engines.

The flow simulator drives these classes with its discrete-event loop; the emulation's
workers drive the very same classes with a real-time loop (testbed.workers.realtime), so
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
from dataclasses import dataclass
from itertools import count

import numpy as np

from testbed.lifecycle import RequestState, served_state
from testbed.model import reuse
from testbed.model.cache import PrefixCache, full_block_count
from testbed.model.candidates import CandidateTable
from testbed.model.loadgrid import KeyCensus, load_key, seed_keys
from testbed.model.timing import TimingModel
from testbed.workloads.requests import Request


@dataclass(eq=False)
class PrefillJob:
    rs: RequestState
    compute_s: float
    layer_s: float
    fetching: bool  # waits for fetched reusable KV (testbed.model.reuse)
    fetched_at: float | None = None
    computed: bool = False


class PrefillInstance:
    """FIFO prefill GPU.

    Without a loop it only estimates (the router's view: `free_at` after each enqueue).
    With a loop and `on_done` it runs the queue: a request computes for T_prefill of its
    non-reused tokens, and one that fetches reusable KV also waits for the fetch (plus a
    layer) before it ends, so a late fetch stalls the GPU and the whole queue behind it.
    """

    def __init__(self, name: str, timing: TimingModel, n_layers: int = 1,
                 loop=None, on_done: Callable[[RequestState], None] | None = None,
                 slowdown: float = 1.0, on_busy: Callable[[float], None] | None = None):
        self.name = name
        self.timing = timing
        self.slowdown = slowdown  # compute time multiplier (a slower or shared GPU)
        self.on_busy = on_busy  # told when a job starts and until when (a hybrid node)
        self.n_layers = n_layers
        self.loop = loop
        self.on_done = on_done
        self.free_at = 0.0  # estimate: when the queue clears if no fetch is late
        self.queue: deque[PrefillJob] = deque()
        self.busy: PrefillJob | None = None
        self.jobs: dict[str, PrefillJob] = {}
        self.stall_s = 0.0  # GPU time spent waiting for fetches

    def enqueue(self, rs: RequestState, now: float, reuse_tokens: int = 0,
                fetching: bool = False) -> float:
        """Queue a request; returns its expected end (no stall)."""
        compute = self.compute_time(rs.req.input_len - reuse_tokens)
        start = max(now, self.free_at)
        self.free_at = start + compute
        rs.prefill, rs.prefill_start, rs.prefill_end = self.name, start, self.free_at
        if self.loop is None:
            return self.free_at
        job = PrefillJob(rs, compute, reuse.layer_time(compute, self.n_layers), fetching)
        self.jobs[rs.req.request_id] = job
        self.queue.append(job)
        if self.busy is None:
            self._start_next()
        return rs.prefill_end

    def compute_time(self, tokens: int) -> float:
        return self.timing.prefill_time(max(tokens, 0)) * self.slowdown

    def expected_end(self, tokens: int, now: float) -> float:
        """When a request of `tokens` would finish if queued now (FlowKV's TTFT estimate)."""
        return max(now, self.free_at) + self.compute_time(tokens)

    @property
    def idle(self) -> bool:
        return self.busy is None and not self.queue

    def fetched(self, request_id: str) -> None:
        """The request's reusable KV has all arrived."""
        job = self.jobs.get(request_id)
        if job is None or job.fetched_at is not None:
            return
        job.fetched_at = self.loop.now
        if job.computed:  # the GPU was stalled on this fetch: the last layer runs now
            self.loop.after(job.layer_s, lambda: self._finish(job))

    def fetch_failed(self, request_id: str, recompute_s: float) -> None:
        """The holder died mid-fetch: the prefix is computed here instead, recompute_s
        more GPU time (counted from now, as if the whole prefix were missing)."""
        job = self.jobs.get(request_id)
        if job is None or job.fetched_at is not None:
            return
        job.fetched_at = self.loop.now + recompute_s - job.layer_s
        if job.computed:
            self.loop.at(job.fetched_at + job.layer_s, lambda: self._finish(job))

    def _start_next(self) -> None:
        if not self.queue:
            self.busy = None
            return
        job = self.busy = self.queue.popleft()
        now = self.loop.now
        job.rs.prefill_start = now
        if self.on_busy is not None:
            self.on_busy(now + job.compute_s)
        self.loop.at(now + job.compute_s, lambda: self._compute_done(job))

    def _compute_done(self, job: PrefillJob) -> None:
        job.computed = True
        if job.fetching and job.fetched_at is None:
            return  # stalled until `fetched`
        end = reuse.prefill_end(job.rs.prefill_start, job.compute_s, job.fetched_at,
                                job.layer_s)
        self.loop.at(end, lambda: self._finish(job))

    def _finish(self, job: PrefillJob) -> None:
        now = self.loop.now
        stall = now - (job.rs.prefill_start + job.compute_s)
        if stall > 1e-12:
            self.stall_s += stall
            self.free_at += stall
        job.rs.prefill_end = now
        del self.jobs[job.rs.req.request_id]
        self.on_done(job.rs)
        self._start_next()


class EarliestFree:
    """The prefill instance whose queue clears first, by (free_at, name), without scanning
    every instance per request (thousands on a large fabric). free_at only grows (an
    enqueue, a late fetch's stall), so a heap entry older than its instance's free_at
    is pushed again with the new value when it reaches the top; the pool only shrinks
    (a dead instance), which rebuilds the heap."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, str]] = []
        self._pool: dict | None = None
        self._size = -1

    def pick(self, pool: dict[str, PrefillInstance]) -> PrefillInstance:
        if pool is not self._pool or len(pool) != self._size:
            self._pool, self._size = pool, len(pool)
            self._heap = [(inst.free_at, name) for name, inst in pool.items()]
            heapq.heapify(self._heap)
        while True:
            free_at, name = self._heap[0]
            inst = pool[name]
            if inst.free_at == free_at:
                return inst
            heapq.heapreplace(self._heap, (inst.free_at, name))


class DecodeBoard:
    """What a router sees of many decode instances (free memory, queued, batch) as
    columns, kept current by the instances themselves: a scheduler over a thousand of
    them reads three arrays instead of three thousand properties per decision. With
    `beta_max`, each one's load key too (loadgrid.load_key: its load term's place), and
    their census (which instances hold each key)."""

    def __init__(self, beta_max: int | None = None):
        self.beta_max = beta_max
        self.free_memory = np.zeros(0)
        self.queued = np.zeros(0, dtype=np.int64)
        self.batch = np.zeros(0, dtype=np.int64)
        self.load_key = np.zeros(0, dtype=np.int64)
        self.census: KeyCensus | None = None  # of load_key, once a table is large enough

    def slot(self) -> int:
        n = len(self.free_memory)
        self.free_memory = np.append(self.free_memory, 0.0)
        self.queued = np.append(self.queued, 0)
        self.batch = np.append(self.batch, 0)
        self.load_key = np.append(self.load_key, 0)
        if self.census is not None:
            self.census.add()
        return n

    # Tables of fewer instances are ranked one by one (Scheduler.SMALL), so no census is
    # kept for them: its upkeep on every publish would buy nothing.
    CENSUS_FROM = 64

    def publish(self, slot: int, free_memory: float, queued: int, batch: int) -> None:
        self.free_memory[slot] = free_memory
        self.queued[slot] = queued
        self.batch[slot] = batch
        if self.beta_max is not None:
            key = self.load_key[slot] = load_key(queued, batch, self.beta_max)
            if self.census is not None:
                self.census.move(slot, key)

    def table(self, names: tuple[str, ...], slots: slice | np.ndarray, hit_tokens: np.ndarray,
              index: dict[str, int], hit_rows: np.ndarray) -> CandidateTable:
        """The instances at `slots` (named `names`, with `hit_tokens` of the request's
        prefix, nonzero at `hit_rows`) as a router's snapshot: their columns copied, with
        their load keys, and with the census where `slots` is every instance in order."""
        table = CandidateTable(names, self.free_memory[slots].copy(), self.queued[slots].copy(),
                               self.batch[slots].copy(), hit_tokens, index=index,
                               hit_rows=hit_rows)
        if self.beta_max is not None:
            whole = isinstance(slots, slice) and slots.start == 0 \
                and len(names) == len(self.load_key)
            if whole and self.census is None and len(names) >= self.CENSUS_FROM:
                self.census = KeyCensus.of(self.load_key.tolist())
            seed_keys(table, self.load_key[slots].copy(), self.beta_max,
                      self.census if whole else None)
        return table


class DecodeInstance:
    def __init__(
        self,
        name: str,
        loop,  # .now, .at(t, fn), .after(dt, fn): the sim's EventLoop or a RealTimeLoop
        timing: TimingModel,
        beta_max: int,
        capacity: float,
        cache: PrefixCache,
        on_complete: Callable[[RequestState], None],
        on_first_token: Callable[[RequestState], None] | None = None,
        board: DecodeBoard | None = None,
        coalesce: bool = False,
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
        self.hold_until = 0.0  # the GPU runs prefill work until then (FlowKV role switch)
        self.board = board
        self.slot = board.slot() if board is not None else -1
        # One event for a run of iterations in which nothing can happen (a discrete-event
        # loop's choice; a real-time one steps each iteration as the GPU would).
        self.coalesce = coalesce
        self._step = 0  # version of the scheduled boundary (older ones are void)
        self._span: tuple[float, float, int] | None = None  # (start, t_iter, iterations)
        self._publish()

    # -- what the router sees ----------------------------------------------------------
    def _publish(self) -> None:
        """Bring this instance's column entries up to date (after every change)."""
        if self.board is not None:
            self.board.publish(self.slot, self.free_memory, self.queued, len(self.batch))

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
            n = full_block_count(req.input_len, self.cache.block_tokens)
            self.cache.pin(req.hash_ids, n)
            self.cache.unpin(req.hash_ids, n)
            self.cache.evict_to(self.capacity - self.reserved)
        self._publish()

    def assign(self, rs: RequestState, hit_blocks: int, output_bytes: float) -> None:
        """The scheduler chose this instance: pin the hit, reserve the rest."""
        self.pending += 1
        self.cache.pin(rs.req.hash_ids, hit_blocks)
        rs.held_blocks = hit_blocks
        rs.reserved = rs.eff_bytes + output_bytes
        self.reserved += rs.reserved
        self.cache.evict_to(self.capacity - self.reserved)
        self._publish()

    def cancel(self, rs: RequestState) -> None:
        """The KV will never come (the transfer failed): undo `assign`."""
        self.pending -= 1
        self.cache.unpin(rs.req.hash_ids, rs.held_blocks)
        rs.held_blocks = 0
        self.reserved -= rs.reserved
        rs.reserved = 0.0
        self._publish()

    def hold(self, until: float) -> None:
        self._resume_steps()  # later boundaries wait for the GPU
        self.hold_until = max(self.hold_until, until)

    def kv_landed(self, rs: RequestState) -> None:
        if self.dead:
            return  # bytes into a dead GPU: recovery deals with the request
        self.pending -= 1
        blocks = full_block_count(rs.req.input_len, self.cache.block_tokens)
        moved = (blocks - rs.held_blocks) * self.cache.block_bytes
        moved = min(moved, rs.reserved)
        self.reserved -= moved
        rs.reserved -= moved
        self.cache.pin(rs.req.hash_ids, blocks, rs.held_blocks)
        rs.held_blocks = blocks
        self.cache.evict_to(self.capacity - self.reserved)
        self.waiting.append(rs)
        if not self.running:
            self._boundary(ended=False)
        else:
            if len(self.batch) < self.beta_max:  # it joins at the very next boundary
                self._resume_steps()
            self._publish()

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
        self._span = None
        self._publish()
        return held

    def _boundary(self, ended: bool, iterations: int = 1) -> None:
        if self.dead:
            return
        self._span = None
        now = self.loop.now
        if ended:
            self.iter_count += iterations
            self.iterations += iterations
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
            start = max(now, self.hold_until)  # prefill work has the GPU first
            self._schedule(start, t_iter)
        else:
            self.running = False
        self._publish()

    def _schedule(self, start: float, t_iter: float) -> None:
        """The next boundary; with `coalesce`, the one that changes something when none
        before it can: nobody waits to join (or the batch is full) and nobody is owed a
        first token, so the next event is the next completion. Its time is the same sum
        of iteration times the single steps would reach."""
        count, end = 1, start + t_iter
        self._span = None
        if self.coalesce and not self._just_admitted and (
                not self.waiting or len(self.batch) >= self.beta_max):
            count = self._finish[0][0] - self.iter_count
            self._span = (start, t_iter, count)
            for _ in range(count - 1):
                end += t_iter
        self._arm(end, count)

    def _arm(self, end: float, iterations: int) -> None:
        """The one scheduled boundary: at `end`, after `iterations` (any earlier one is
        void)."""
        self._step += 1
        step = self._step
        self.loop.at(end, lambda: self._fire(step, iterations))

    def _fire(self, step: int, iterations: int) -> None:
        if step == self._step:
            self._boundary(ended=True, iterations=iterations)

    def _resume_steps(self) -> None:
        """Something may change within a coalesced run: count the boundaries already
        passed and go back to single steps from the next one."""
        if self._span is None or self.dead:
            return
        start, t_iter, count = self._span
        now, passed, end = self.loop.now, 0, start + t_iter
        while passed < count - 1 and end <= now:
            passed += 1
            end += t_iter
        self.iter_count += passed
        self.iterations += passed
        self._span = None
        self._arm(end, 1)

    def _complete(self, rs: RequestState, now: float) -> None:
        del self.batch[id(rs)]
        rs.done = now
        self.cache.unpin(rs.req.hash_ids, rs.held_blocks)
        rs.held_blocks = 0
        self.reserved -= rs.reserved
        rs.reserved = 0.0
        rs.terminate(served_state(rs.recovery))
        self._publish()
        self.on_complete(rs)
