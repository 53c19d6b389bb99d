"""KV-reuse retrieval (MFS stage 1): holder choice, RLI, and the prefill stall it causes."""

from __future__ import annotations

import pytest

from testbed.flowsim.events import EventLoop
from testbed.lifecycle import RequestState
from testbed.model import reuse
from testbed.model.timing import TimingModel
from testbed.serving import PrefillInstance
from testbed.workloads.requests import Request


def test_the_longest_cached_prefix_is_fetched_if_long_enough():
    assert reuse.choose_holder({"i4": 1024, "i5": 2048, "i6": 2048}, 512) == reuse.Reuse("i5", 2048)
    assert reuse.choose_holder({"i4": 256}, 512) is None
    assert reuse.choose_holder({}, 512) is None


def test_rli_is_the_layer_fetched_next_minus_the_layer_computing():
    # 10 layers of 0.1 s from t=1.0; at t=1.25 layer 2 is computing
    assert reuse.executing_layer(1.25, start=1.0, layer_s=0.1) == 2
    assert reuse.executing_layer(0.75, start=1.0, layer_s=0.1) == -3  # still queued
    assert reuse.fetched_layers(50, 100, 10) == 5
    assert reuse.retrieval_rli(1.25, 1.0, 0.1, 50, 100, 10) == 3
    assert reuse.retrieval_rli(1.75, 1.0, 0.1, 50, 100, 10) == 0  # computing has caught up
    assert reuse.retrieval_rli(0.75, 1.0, 0.1, 0, 100, 10) == 3  # queued: room to defer


def test_prefill_ends_one_layer_after_a_late_fetch():
    assert reuse.prefill_end(0.0, 1.0, None, 0.1) == 1.0
    assert reuse.prefill_end(0.0, 1.0, 0.5, 0.1) == 1.0  # fetched in time: no stall
    assert reuse.prefill_end(0.0, 1.0, 1.5, 0.1) == pytest.approx(1.6)


def _rs(rid: str, tokens: int) -> RequestState:
    return RequestState(req=Request(rid, 0.0, tokens, 1, ()), measured=True,
                        kv_bytes=0.0)


def test_a_late_fetch_stalls_the_gpu_and_the_queue_behind_it():
    loop, done = EventLoop(), []
    timing = TimingModel(prefill_per_token_s=0.001, prefill_base_s=0.0)
    gpu = PrefillInstance("p0", timing, n_layers=10, loop=loop,
                          on_done=lambda rs: done.append((rs.req.request_id, loop.now)))
    a, b = _rs("a", 2000), _rs("b", 500)
    gpu.enqueue(a, 0.0, reuse_tokens=1000, fetching=True)  # computes 1000 tokens: 1 s
    gpu.enqueue(b, 0.0)
    loop.at(3.0, lambda: gpu.fetched("a"))
    loop.run(until=10)
    assert done == [("a", pytest.approx(3.1)), ("b", pytest.approx(3.6))]
    assert gpu.stall_s == pytest.approx(2.1)
    assert b.prefill_start == pytest.approx(3.1)


def test_a_failed_fetch_is_computed_instead():
    loop, done = EventLoop(), []
    timing = TimingModel(prefill_per_token_s=0.001, prefill_base_s=0.0)
    gpu = PrefillInstance("p0", timing, n_layers=10, loop=loop,
                          on_done=lambda rs: done.append(loop.now))
    gpu.enqueue(_rs("a", 2000), 0.0, reuse_tokens=1000, fetching=True)
    loop.at(0.5, lambda: gpu.fetch_failed("a", recompute_s=1.0))
    loop.run(until=10)
    assert done == [pytest.approx(1.5)]
