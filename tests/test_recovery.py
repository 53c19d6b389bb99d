"""KVRS recovery cost model and policy (testbed/model/recovery.py)."""

from __future__ import annotations

import pytest

from testbed.model.kv import MODEL_PRESETS, kv_cache_bytes
from testbed.model.recovery import (
    OPT13B_PREFILL,
    BandwidthEWMA,
    MigrationSlots,
    PrefillTable,
    crossover_queue_depth,
    decide,
    migrate_cost,
    recompute_cost,
)

GBPS = 1e9


def test_migrating_1_21_gb_over_25_gbps_takes_387_ms():
    assert migrate_cost(1.21e9, 25 * GBPS) == pytest.approx(0.3872)
    assert migrate_cost(1e9, 0.0) == float("inf")


def test_recompute_interpolates_the_profiled_table():
    assert OPT13B_PREFILL.time(512) == pytest.approx(0.03)
    assert OPT13B_PREFILL.time(768) == pytest.approx(0.045)
    assert OPT13B_PREFILL.time(1536) == pytest.approx(0.09)
    assert OPT13B_PREFILL.time(4096) == pytest.approx(0.24)  # last segment extended
    assert recompute_cost(1024, OPT13B_PREFILL, queue_delay_s=0.12) == pytest.approx(0.18)
    with pytest.raises(ValueError):
        PrefillTable(((512, 0.03),))


def test_crossover_matches_the_seeds_setting():
    # 1.21 GB of OPT-13B KV is ~1477 tokens; recompute queues ~60 ms per request
    tokens = round(1.21e9 / kv_cache_bytes(MODEL_PRESETS["opt-13b"], 1))
    q = crossover_queue_depth(1.21e9, 25 * GBPS, tokens, OPT13B_PREFILL, 0.060)
    assert q == pytest.approx((0.3872 - OPT13B_PREFILL.time(tokens)) / 0.060)
    assert 4.9 < q < 5.1
    assert crossover_queue_depth(1e6, 100 * GBPS, 2048, OPT13B_PREFILL, 0.06) == 0.0


@pytest.mark.parametrize("migrate_s, recompute_s, expected", [
    (0.20, 0.30, "migrate"),    # migrating is cheaper
    (0.40, 0.30, "recompute"),  # past the crossover
    (0.30, 0.30, "migrate"),    # a tie migrates
])
def test_adaptive_takes_the_cheaper_path(migrate_s, recompute_s, expected):
    assert decide("adaptive", migrate_s, recompute_s).action == expected
    assert decide("always_migrate", migrate_s, recompute_s).action == "migrate"
    assert decide("always_recompute", migrate_s, recompute_s).action == "recompute"


def test_abort_only_when_neither_path_meets_the_budget():
    d = decide("always_migrate", 2.0, 3.0, budget_s=1.5)
    assert d.action == "abort" and "remaining TTFT budget of 1.500 s" in d.reason
    assert decide("always_migrate", 2.0, 1.0, budget_s=1.5).action == "migrate"  # static
    assert decide("adaptive", 2.0, 1.0, budget_s=1.5).action == "recompute"
    with pytest.raises(ValueError, match="unknown recovery policy"):
        decide("teleport", 1.0, 1.0)


def test_migration_slots_cap_concurrency():
    slots = MigrationSlots(2)
    assert slots.acquire() and slots.acquire() and not slots.acquire()
    slots.release()
    assert slots.acquire()
    with pytest.raises(ValueError):
        MigrationSlots(0)


def test_ewma_of_measured_rates():
    ewma = BandwidthEWMA(alpha=0.5)
    ewma.observe(1e9, 1.0)  # 8 Gbit/s
    ewma.observe(1e9, 0.5)  # 16 Gbit/s
    assert ewma.value == pytest.approx(12e9)


def test_plan_prices_each_path_on_its_own_target_and_falls_back_without_a_slot():
    from testbed.model.recovery import plan_recovery

    slots = MigrationSlots(1)
    # migrating to an idle remote instance beats recomputing behind a loaded local one
    plan = plan_recovery("adaptive", 1.21e9, 1477, 25 * GBPS, migrate_wait_s=0.0,
                         recompute_wait_s=0.0, recompute_backlog_s=0.6,
                         table=OPT13B_PREFILL, budget_s=5.0, slots=slots)
    assert plan.action == "migrate" and plan.migrate_s == pytest.approx(0.3872)
    again = plan_recovery("adaptive", 1.21e9, 1477, 25 * GBPS, 0.0, 0.0, 0.6, OPT13B_PREFILL,
                          5.0, slots)  # the only slot is taken
    assert again.action == "recompute" and again.slot_fallback
    idle = plan_recovery("adaptive", 1.21e9, 1477, 25 * GBPS, 0.0, 0.0, 0.0, OPT13B_PREFILL,
                         5.0, MigrationSlots())
    assert idle.action == "recompute"  # an idle local GPU recomputes 1477 tokens in 89 ms


def test_nearest_instance_prefers_the_failed_ones_rack_then_the_least_loaded():
    from testbed.model.recovery import nearest_instance
    from testbed.scenario import load_scenario
    from tests.conftest import ROOT

    spec = load_scenario(ROOT / "scenarios" / "default.yaml").cluster.spec()
    decodes = [i.name for i in spec.decode_pool if i.name != "i6"]
    rack = sorted(n for n in decodes if spec.tier("i6", n) == 1)  # i4, i5
    assert nearest_instance(spec, "i6", decodes, lambda n: 0.0) == "i7"  # same server
    without = [n for n in decodes if n != "i7"]
    load = {"i4": 2.0, "i5": 1.0}
    assert nearest_instance(spec, "i6", without, lambda n: load.get(n, 0.0)) == "i5"
    busy = {n: (9.0 if n in rack else 0.0) for n in without}
    assert nearest_instance(spec, "i6", without, busy.get) in rack  # locality before load
