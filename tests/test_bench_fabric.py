"""bench_fabric's offered load comes from the placement, on any fat-tree it builds."""

from __future__ import annotations

import importlib.util
from collections import Counter

import pytest

from testbed.scenario import load_scenario
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_fabric",
                                                  ROOT / "benchmarks" / "bench_fabric.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("small, flows", [(False, 8), (True, 4)])
def test_every_prefill_host_sends_to_a_tier_2_and_a_tier_3_receiver(bench, tmp_path,
                                                                     small, flows):
    sc = load_scenario(bench.scenario_file(tmp_path, 2e-4, "user", small=small))
    spec = sc.cluster.spec()
    pairs = bench.load_pairs(spec)
    assert len(pairs) == flows
    prefill = {p.name for p in spec.prefill_pool}
    assert Counter(src for src, _ in pairs) == dict.fromkeys(prefill, 2)
    assert Counter(spec.tier(s, d) for s, d in pairs) == {2: flows // 2, 3: flows // 2}
    receivers = [d for _, d in pairs]
    assert len(set(receivers)) == flows and not prefill & set(receivers)
    # cross-pod receivers land in more than one rack (the core links share the load)
    assert len({spec.by_name[d].rack for s, d in pairs if spec.tier(s, d) == 3}) > 1
