"""Flow simulator behaviour on small, hand-checkable cases."""

import gc
import math

import pytest

from testbed.cells import ConservationError, check_conservation
from testbed.flowsim.network import FluidNetwork
from testbed.flowsim.simulator import FlowSimulation, simulate
from testbed.lifecycle import RequestState
from testbed.model.kv import kv_cache_bytes
from testbed.records import PARTIAL
from testbed.runner import run_simulated
from testbed.scenario import Scenario, load_scenario
from testbed.workloads.build import Workload, build_workload
from testbed.workloads.requests import Request
from tests.conftest import ROOT

DEFAULT = str(ROOT / "scenarios" / "default.yaml")


def one_request_workload(input_len=8192, output_len=3) -> Workload:
    req = Request("r0", 0.0, input_len, output_len, tuple(range(1000, 1000 + input_len // 512)))
    return Workload([req], [], 1.0, 1.0, warmup_s=0.0, measure_s=10.0, slo_s=5.0)


def test_a_lone_request_follows_the_timing_and_cost_models(trace_path):
    sc = Scenario(name="one", workload={"trace": str(trace_path)})
    wl = one_request_workload()
    sim = FlowSimulation(sc, "netkv-full", 1, wl)
    row = sim.run().requests[0]
    timing, model = sc.timing_model(), sc.model_spec()
    prefill = timing.prefill_time(8192)
    size = kv_cache_bytes(model, 8192)
    # cold caches: NetKV picks the same-pod tier (50 Gbps per path, 4 flows on one path)
    assert row["tier"] == 2 and row["hit_tokens"] == 0
    xfer = size / (50e9 / 8) + 8e-6
    assert row["transfer_end"] - row["transfer_start"] == pytest.approx(xfer, rel=1e-6)
    # admitted at once on an idle instance; first token after one iteration of batch 1
    first = prefill + xfer + timing.iteration_time(1)
    assert row["ttft"] == pytest.approx(first, rel=1e-6)
    assert row["done"] == pytest.approx(first + 2 * timing.iteration_time(1), rel=1e-6)
    assert row["tbt"] == pytest.approx(timing.iteration_time(1))
    assert row["state"] == "completed"


def test_the_transfer_engine_s_notice_adds_its_trip_after_the_last_byte(trace_path):
    # the emulation lands an engine's transfer at the notice that follows its writes:
    # one more one-way trip of the tier (8 us on tier 2) than the pusher's landing
    def transfer_s(transport):
        sc = Scenario(name="one", workload={"trace": str(trace_path)},
                      emulation={"kv_transport": transport})
        row = FlowSimulation(sc, "netkv-full", 1, one_request_workload()).run().requests[0]
        return row["transfer_end"] - row["transfer_start"], row["tier"]

    (pusher, tier), (engine, _) = transfer_s("pusher"), transfer_s("mooncake")
    assert tier == 2 and engine - pusher == pytest.approx(8e-6, rel=1e-6)


def test_the_engine_s_lanes_hold_a_pair_s_next_transfer_until_the_first_frees_them(trace_path):
    # the engine keeps 4 connections per peer (its lanes) for every shard to it: a second
    # transfer of 4 shards to the same target waits until the first's end; the pusher
    # opens 4 more connections and the two share the pair's path
    def run(transport):
        sc = Scenario(name="lanes", workload={"trace": str(trace_path)},
                      emulation={"kv_transport": transport}, network={"ecmp": "per-pair"})
        sim = FlowSimulation(sc, "netkv-full", 1, one_request_workload())
        prefill, decode = sim.spec.prefill_pool[0].name, sim.spec.decode_pool[0].name
        landed = {}
        sim._all_shards_in = lambda rs: landed.setdefault(rs.req.request_id, sim.loop.now)

        def send(rid: str, size: float) -> None:
            sim.start_transfer(RequestState(Request(rid, 0.0, 8192, 3, ()), True, size,
                                            prefill=prefill, decode=decode, tier=1,
                                            eff_bytes=size))

        send("met", 1e3)  # the pair's first transfer: its first shard goes alone
        sim.loop.run(until=1.0)
        assert landed.pop("met") < 1.0
        t0 = sim.loop.now
        for rid in ("a", "b"):
            send(rid, 1e9)
        sim.loop.run(until=60.0)
        starts = {(t["request"], t["shard"]): t["start"] - t0 for t in sim.transfers
                  if t["request"] != "met"}
        return {rid: t - t0 for rid, t in landed.items()}, starts

    (pusher, p_starts), (engine, e_starts) = run("pusher"), run("mooncake")
    assert len(p_starts) == len(e_starts) == 8
    assert pusher["a"] == pytest.approx(pusher["b"]) and set(p_starts.values()) == {0.0}
    assert engine["a"] == pytest.approx(pusher["a"] / 2, rel=1e-6)  # the path alone
    assert engine["b"] == pytest.approx(pusher["b"], rel=1e-6)  # then the second
    assert [e_starts[("b", k)] for k in range(4)] == [0.0] * 4  # handed over at once


@pytest.mark.parametrize("enabled", [True, False])
def test_a_run_pauses_the_collector_and_leaves_it_nothing_to_trace(trace_path, monkeypatch,
                                                                   enabled):
    sc = Scenario(name="gc", workload={"trace": str(trace_path), "measure_s": 5.0})
    wl = build_workload(sc, 1)
    during = []
    run = FlowSimulation.run
    monkeypatch.setattr(FlowSimulation, "run",
                        lambda self: during.append(gc.isenabled()) or run(self))
    gc.collect()
    (gc.enable if enabled else gc.disable)()
    try:
        result = simulate(sc, "cla", 1, wl)
        assert gc.isenabled() is enabled  # restored as it was
        left = gc.collect()
    finally:
        gc.enable()
    assert during == [False] and len(result.requests) == len(wl.requests) > 20
    # the run's state (thousands of objects in cycles) was dropped, not left to the
    # collector
    assert left < 500, left


def test_per_flow_ecmp_can_beat_the_per_path_figure(trace_path):
    sc = Scenario(name="pf", workload={"trace": str(trace_path)},
                  network={"ecmp": "per-flow"}, schedulers=["netkv-full"])
    rows = FlowSimulation(sc, "netkv-full", 3, one_request_workload()).run()
    per_transfer = (kv_cache_bytes(sc.model_spec(), 8192)) / (50e9 / 8)
    row = rows.requests[0]
    assert row["transfer_end"] - row["transfer_start"] < per_transfer * 0.99
    assert len({t["path"] for t in rows.transfers}) > 1


def test_rejects_when_no_decode_instance_has_memory(trace_path):
    # room for the smallest RAG request (4,096 tokens, 1.34 GB) and little more
    sc = Scenario(name="tiny", workload={"trace": str(trace_path)},
                  cluster={"memory_gb": 2.0, "memory_reserve_gb": 0.5})
    wl = build_workload(sc, 1)
    res = FlowSimulation(sc, "cla", 1, wl).run()
    check_conservation(res.requests, len(wl.requests))
    rejected = [r for r in res.requests if r["state"] == "rejected"]
    assert rejected and all("memory" in r["reason"] for r in rejected)
    # only a request whose KV cannot fit in the room left is rejected
    assert all(r["kv_bytes"] > 1.5e9 for r in rejected)


def test_conservation_check_catches_lost_and_duplicated_requests():
    rows = [{"id": "a", "state": "completed"}, {"id": "b", "state": None}]
    with pytest.raises(ConservationError):
        check_conservation(rows, 2)
    with pytest.raises(ConservationError):
        check_conservation([{"id": "a", "state": "completed"}] * 2, 2)
    with pytest.raises(ConservationError):
        check_conservation(rows[:1], 2)


def test_batch_never_exceeds_beta_max_and_queue_waits(trace_path):
    sc = Scenario(name="b", workload={"trace": str(trace_path), "load": 2.0},
                  cluster={"beta_max": 2})
    wl = build_workload(sc, 1)
    sim = FlowSimulation(sc, "rr", 1, wl)
    res = sim.run()
    check_conservation(res.requests, len(wl.requests))
    done = [r for r in res.requests if r["state"] == "completed"]
    for name in sim.decode:
        mine = sorted((r["first_token"], r["done"]) for r in done if r["decode"] == name)
        for t, _ in mine:
            live = sum(1 for a, b in mine if a <= t < b)
            assert live <= 2


def test_run_folder_has_the_shared_records(trace_path, tmp_path):
    sc = Scenario(name="rec", workload={"trace": str(trace_path), "measure_s": 5.0},
                  schedulers=["rr", "netkv-full"])
    outcome = run_simulated(sc, tmp_path)
    cell = outcome.folder / "cells" / "000-base" / "netkv-full" / "seed1"
    for name in ("requests.csv", "transfers.csv", "links.csv", "summary.json"):
        assert (cell / name).is_file()
    assert (outcome.folder / "table.md").read_text().count("| NetKV-Full |") == 1
    assert not (outcome.folder / PARTIAL).exists()
    assert (outcome.folder / "scenario.yaml").is_file()


def test_an_interrupted_run_is_marked_partial(trace_path, tmp_path):
    sc = Scenario(name="int", workload={"trace": str(trace_path), "measure_s": 5.0})
    calls = []

    def interrupt(label):
        calls.append(label)
        if len(calls) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_simulated(sc, tmp_path, interrupt)
    (folder,) = tmp_path.iterdir()
    assert "interrupted by SIGINT" in (folder / PARTIAL).read_text()
    assert (folder / "cells" / "000-base" / "rr" / "seed1" / "requests.csv").is_file()


def test_background_jitter_moves_the_oracle(trace_path):
    sc = Scenario(name="bg", workload={"trace": str(trace_path), "measure_s": 5.0},
                  network={"background": {"tier3": 0.3, "jitter": 0.5, "change_s": 0.5}})
    sim = FlowSimulation(sc, "netkv-full", 1, build_workload(sc, 1))
    seen = []
    original = sim._refresh_oracle

    def spy():
        original()
        seen.append(sim.oracle().congestion_of(3))

    sim._refresh_oracle = spy
    sim.run()
    assert len(set(seen)) > 1 and all(0.1 < c < 0.5 for c in seen)


def test_default_scenario_file_runs(tmp_path):
    sc = load_scenario(DEFAULT, {"seeds": 1, "workload.measure_s": 5.0})
    outcome = run_simulated(sc, tmp_path)
    assert {r.scheduler for r in outcome.rows} == {"rr", "cla", "netkv-full"}


def test_link_samples_as_columns_give_the_rows_and_tier_means_of_the_rows(trace_path):
    """The flow simulator keeps link samples as columns (records.LinkSamples): the rows it
    yields for links.csv and the per-tier utilisation from its columns agree with the
    row-by-row summary, and every link is sampled every second."""

    from testbed.metrics import summarize

    sc = load_scenario(DEFAULT).with_overrides({"network.background": {"tier3": 0.3}})
    wl = build_workload(sc, 1)
    result = FlowSimulation(sc, "cla", 1, wl).run()
    rows = list(result.links)
    n_links = len(result.links.names)
    assert len(rows) == len(result.links) and len(rows) % n_links == 0
    assert {r["link"] for r in rows[:n_links]} == set(result.links.names)
    columns = summarize(result.requests, result.links, wl.slo_s, wl.measure_s)
    by_rows = summarize(result.requests, rows, wl.slo_s, wl.measure_s)
    assert columns["tier_utilisation"] == by_rows["tier_utilisation"]
    assert columns["tier_utilisation"]["3"] > 0.3  # the background alone is 30%
    assert all(columns[k] == by_rows[k] or (math.isnan(columns[k]) and math.isnan(by_rows[k]))
               for k in columns if isinstance(columns[k], float))


@pytest.mark.parametrize("scenario, key", [("exp8-faults.yaml", "netkv-full"),
                                           ("exp10-flowkv.yaml", "flowkv"),
                                           ("exp9-mfs-reuse.yaml", "cla")])
def test_the_candidate_table_is_what_the_instances_report_at_every_decision(scenario, key):
    """The simulator reads decode state from columns the instances keep (DecodeBoard) and
    prefix hits only from caches holding a request's first block: at every decision both
    equal what each instance's own properties and cache say."""
    sc = load_scenario(str(ROOT / "scenarios" / scenario))
    wl = build_workload(sc, 1)
    sim = FlowSimulation(sc, key, 1, wl)
    table_of = sim.candidates
    checked = []

    def candidates(req):
        table = table_of(req)
        for cand in table:
            d = sim.decode[cand.instance]
            assert (cand.free_memory, cand.queued, cand.batch) == \
                (d.free_memory, d.queued, d.batch_size)
            assert cand.hit_tokens == d.cache.prefix_hit_tokens(req.hash_ids, req.input_len)
        checked.append(len(table))
        return table

    sim.candidates = candidates
    sim.run()
    assert len(checked) >= len(wl.requests) // 2


@pytest.mark.parametrize("scenario, key", [("exp8-faults.yaml", "netkv-full"),
                                           ("exp10-flowkv.yaml", "flowkv"),
                                           ("exp9-mfs-reuse.yaml", "cla"),
                                           ("default.yaml", "rr")])
def test_coalesced_decode_iterations_change_nothing(monkeypatch, scenario, key):
    """Decode instances in the flow simulator give one event to a run of iterations in
    which nothing can happen; every request's times are those of stepping each
    iteration (FlowKV's holds, faults and reuse fetches interrupt runs)."""
    sc = load_scenario(str(ROOT / "scenarios" / scenario))
    wl = build_workload(sc, 1)
    coalesced = FlowSimulation(sc, key, 1, wl).run()
    monkeypatch.setattr(FlowSimulation, "COALESCE_ITERATIONS", False)
    stepped = FlowSimulation(sc, key, 1, wl).run()
    assert coalesced.events < stepped.events / 3
    assert coalesced.requests == stepped.requests


def _close(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9,
                                                                 abs_tol=1e-12)
    return a == b


@pytest.mark.parametrize("scenario, key, overrides", [
    ("exp8-faults.yaml", "netkv-full", {}),
    ("default.yaml", "cla", {"network.ecmp": "per-flow"}),
    ("exp9-mfs-reuse.yaml", "cla", {"network.flow_policy": "fair"}),  # with reuse fetches
])
def test_shards_on_one_path_as_one_flow_change_nothing(monkeypatch, scenario, key, overrides):
    """Under fair fluid sharing a transfer's shards on one path are one flow of their
    summed weight: every request and transfer row is what one flow per shard gives
    (to rounding), with fewer network flows; per-flow ECMP bundles per path."""
    sc = load_scenario(str(ROOT / "scenarios" / scenario)).with_overrides(overrides)
    wl = build_workload(sc, 1)
    flows = []
    add_flow = FluidNetwork.add_flow

    def counting(self, *args, **kwargs):
        flows.append(kwargs.get("streams", 1))
        return add_flow(self, *args, **kwargs)

    monkeypatch.setattr(FluidNetwork, "add_flow", counting)
    bundled = FlowSimulation(sc, key, 1, wl).run()
    bundled_flows, flows[:] = len(flows), []
    monkeypatch.setattr(FlowSimulation, "_stream_groups",
                        lambda self, shards: [(p, (k,)) for k, p in shards])
    separate = FlowSimulation(sc, key, 1, wl).run()
    assert bundled_flows < len(flows) and set(flows) == {1}
    assert len(bundled.requests) == len(separate.requests)
    for a, b in zip(bundled.requests, separate.requests, strict=True):
        assert all(_close(a[f], b[f]) for f in a), (a, b)

    def order(rows):
        return sorted(rows, key=lambda r: (r["request"], str(r["shard"])))

    for a, b in zip(order(bundled.transfers), order(separate.transfers), strict=True):
        assert all(_close(a[f], b[f]) for f in a), (a, b)
