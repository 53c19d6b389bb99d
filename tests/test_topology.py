"""Fat-tree spec: the paper's cluster, placement, tiers, links, scale."""

from collections import Counter
from pathlib import Path

import pytest

from testbed.topologies.fattree import FatTreeSpec


def test_paper_cluster_has_16_instances_4_prefill_12_decode():
    spec = FatTreeSpec()
    assert spec.n_gpus == 64 and spec.n_instances == 16
    assert len(spec.prefill_pool) == 4 and len(spec.decode_pool) == 12
    assert spec.tier_bandwidth_gbps == {0: 3600.0, 1: 100.0, 2: 50.0, 3: 25.0}
    assert spec.tier_latency_us == {0: 1.0, 1: 3.0, 2: 8.0, 3: 15.0}


def test_default_placement_never_shares_server_or_rack():
    spec = FatTreeSpec()
    for p in spec.prefill_pool:
        for d in spec.decode_pool:
            assert (p.server, p.rack) != (d.server, d.rack)
            assert p.rack != d.rack
    # 4 decode instances in the prefill pod's other rack, 8 across the core: 1/3 vs 2/3
    assert Counter(spec.tier_map.values()) == {2: 16, 3: 32}


def test_colocated_placement_reaches_tiers_0_and_1():
    tiers = set(FatTreeSpec(placement="colocated").tier_map.values())
    assert tiers == {0, 1, 2, 3}


def test_explicit_prefill_list_overrides_placement():
    spec = FatTreeSpec(prefill=("i5", "i9"))
    assert [i.name for i in spec.prefill_pool] == ["i5", "i9"]
    with pytest.raises(ValueError, match="unknown instances"):
        FatTreeSpec(prefill=("i99",))


def test_link_counts_realise_the_oversubscription_ratios():
    spec = FatTreeSpec()
    rack_up = sum(link.capacity_gbps for link in spec.links if link.a == "tor0")
    rack_down = sum(link.capacity_gbps for link in spec.links
                    if link.b == "tor0" and link.tier == 1)
    assert rack_down / rack_up == pytest.approx(2.0)
    pod_aggs = {spec.agg(0, j) for j in range(spec.n_aggs)}
    pod_core = sum(link.capacity_gbps for link in spec.links if link.a in pod_aggs and link.tier == 3)
    pod_hosts = sum(link.capacity_gbps for link in spec.links
                    if link.tier == 1 and spec.by_name[link.a].pod == 0)
    assert pod_hosts / pod_core == pytest.approx(4.0)


def test_paths_per_tier():
    spec = FatTreeSpec()
    # i4 shares a server with i5: NVLink bus; i6 same rack; i8 same pod (rack 1 is pod 0)
    assert len(spec.paths("i4", "i5")) == 1 and spec.tier("i4", "i5") == 0
    assert spec.tier("i4", "i6") == 1 and len(spec.paths("i4", "i6")[0]) == 2
    assert spec.tier("i0", "i4") == 2 and len(spec.paths("i0", "i4")) == spec.n_aggs
    cross = spec.paths("i0", "i15")
    assert spec.tier("i0", "i15") == 3 and len(cross) == spec.n_cores
    assert all(len(p) == 6 for p in cross)
    links = {(link.a, link.b) for link in spec.links} | {(link.b, link.a) for link in spec.links}
    assert all(hop in links for path in cross for hop in path)


@pytest.mark.parametrize("kwargs", [{}, {"pods": 8}])
def test_every_pair_has_distinct_chained_paths_counted_without_building_them(kwargs):
    spec = FatTreeSpec(**kwargs)
    links = {(link.a, link.b) for link in spec.links} | {(link.b, link.a) for link in spec.links}
    names = [i.name for i in spec.instances]
    seen_tiers = set()
    for src in names[:: max(1, len(names) // 12)]:
        for dst in names:
            if src == dst:
                continue
            paths = spec.paths(src, dst)
            seen_tiers.add(spec.tier(src, dst))
            assert spec.path_count(src, dst) == len(paths) == len({tuple(p) for p in paths})
            for path in paths:
                assert path[0][0] == src and path[-1][1] == dst
                assert all(a[1] == b[0] for a, b in zip(path[:-1], path[1:], strict=True))
                assert all(hop in links for hop in path)
    assert seen_tiers >= {1, 2, 3}


@pytest.mark.parametrize("pods", [4, 8, 16, 32])
def test_larger_clusters_build(pods):
    spec = FatTreeSpec(pods=pods)
    assert spec.n_gpus == 32 * pods
    assert len(spec.prefill_pool) == spec.n_instances // 4
    assert len(spec.tier_map) == len(spec.prefill_pool) * len(spec.decode_pool)
    assert set(spec.tier_map.values()) <= {2, 3}


@pytest.mark.parametrize("kwargs, field", [
    ({"tp": 3}, "tp"), ({"pods": 0}, "pods"), ({"core_oversubscription": 0.5}, "core_"),
    ({"prefill_instances": 16}, "prefill_instances"), ({"placement": "x"}, "placement"),
])
def test_impossible_specs_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        FatTreeSpec(**kwargs)


def test_captured_links_are_read_once_and_checked_against_the_fabric():
    from testbed.scenario import load_scenario
    from testbed.topologies.captured import capture_error, directions

    assert directions(["tor0>agg0", "tor0-agg0", "agg1-core0"]) == [
        ("tor0", "agg0"), ("agg0", "tor0"), ("agg1", "core0"), ("core0", "agg1")]
    spec = FatTreeSpec()
    assert capture_error(spec, "tor0-agg0") is None and capture_error(spec, "agg0>tor0") is None
    assert "not a link" in capture_error(spec, "tor0-core0")
    assert "not a link" in capture_error(spec, "tor0")
    assert "give 'tor0>i0'" in capture_error(spec, "i0>tor0")  # a host's end
    with pytest.raises(ValueError, match=r"emulation\.capture\.1: 'i0>tor0'"):
        load_scenario(Path(__file__).parent.parent / "scenarios" / "default.yaml",
                      {"emulation.capture": ["tor0-agg0", "i0>tor0"]})


@pytest.mark.parametrize("kwargs", [{}, {"placement": "colocated"}, {"pods": 4}])
def test_the_lazy_tier_map_is_the_pair_by_pair_one(kwargs):
    """Every lookup, the pair set, the order and the per-tier counts of the map stored
    pair by pair, which a large fabric cannot afford to build."""
    spec = FatTreeSpec(**kwargs)
    stored = {(p.name, d.name): spec.tier(p.name, d.name)
              for p in spec.prefill_pool for d in spec.decode_pool}
    lazy = spec.tier_map
    assert list(lazy.items()) == list(stored.items()) and len(lazy) == len(stored)
    assert lazy.counts() == dict(sorted(Counter(stored.values()).items()))
    names = [i.name for i in spec.instances]
    every = {(a, b): spec.tier(a, b) for a in names for b in names if a != b}
    assert dict(spec.all_tiers) == every
    assert spec.all_tiers.counts() == dict(sorted(Counter(every.values()).items()))
    p, d = spec.prefill_pool[0].name, spec.decode_pool[0].name
    for missing in ((d, p), (p, p), ("nope", d)):
        assert missing not in lazy
        with pytest.raises(KeyError):
            lazy[missing]


def test_a_tier_row_on_arrays_is_the_lookups_one():
    spec = FatTreeSpec(pods=4)
    names = tuple(d.name for d in spec.decode_pool)
    for p in spec.prefill_pool:
        assert spec.tier_map.row(p.name, names).tolist() == [
            spec.tier_map[(p.name, n)] for n in names]
    p = spec.prefill_pool[0].name
    with pytest.raises(KeyError):
        spec.tier_map.row(p, (*names, p))  # a pair the map does not hold
    with pytest.raises(KeyError):
        spec.tier_map.row(names[0], names)  # a decode instance is no source here
    every = tuple(i.name for i in spec.instances)
    with pytest.raises(KeyError):
        spec.all_tiers.row(p, every)  # src among the names: (src, src) is no pair
    others = tuple(n for n in every if n != p)
    assert spec.all_tiers.row(p, others).tolist() == [spec.tier(p, n) for n in others]
