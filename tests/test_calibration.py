"""Calibration fit, per-pair paths, and replay along recorded paths (pure)."""

from __future__ import annotations

import pytest

from testbed.flowsim.network import FluidNetwork
from testbed.model.cost import gbps_to_bytes_per_s
from testbed.model.tcp import payload_share
from testbed.ns3sim.ns3_fabric import wire_payload_share
from testbed.scenario import load_scenario
from testbed.validate.engines.flow_replay import replay_transfers
from testbed.validate.judging.calibration import fit_capacity, fit_tier, lower_envelope
from tests.conftest import ROOT


def test_fit_recovers_capacity_factor_and_fixed_cost():
    rate = gbps_to_bytes_per_s(25)
    samples = [(b, b / (0.9 * rate) + 0.005) for b in (0.5e9, 1e9, 2e9, 4e9)]
    fit = fit_tier(3, samples, rate)
    assert fit.factor == pytest.approx(0.9)
    assert fit.overhead_s == pytest.approx(0.005)
    assert fit.r2 == pytest.approx(1.0)


def test_capacity_is_fitted_on_each_sizes_fastest_repeat():
    rate = gbps_to_bytes_per_s(25)
    clean = {b: b / (0.9 * rate) + 0.005 for b in (0.5e9, 2e9, 8e9)}
    # a timeout stalls the one 2 GB sample of the plain fit by 200 ms; its repeat is clean
    samples = [(0.5e9, clean[0.5e9]), (2e9, clean[2e9] + 0.2), (8e9, clean[8e9]),
               (2e9, clean[2e9]), (0.5e9, clean[0.5e9] + 0.2)]
    assert lower_envelope(samples) == sorted(clean.items())
    assert fit_capacity(3, samples, rate, 0.95).factor == pytest.approx(0.9)
    assert fit_tier(3, samples, rate).factor != pytest.approx(0.9, rel=0.01)


def test_capacity_is_capped_at_the_payloads_share_of_the_wire():
    rate = gbps_to_bytes_per_s(25)
    # the smaller sizes stalled in every repeat, the largest not: the line tilts past the
    # wire's rate
    samples = [(0.5e9, 0.5e9 / rate + 0.2), (2e9, 2e9 / rate + 0.2), (8e9, 8e9 / rate)]
    fit = fit_capacity(3, samples, rate, payload_share())
    assert fit.fitted > 1.0 and fit.factor == pytest.approx(payload_share())
    # the emulation's Ethernet frame carries 1448 payload bytes in 1514, ns-3's PPP 1490,
    # which the twin's "frames" (and "htb") give the frame's time on the wire
    assert payload_share() == pytest.approx(1448 / 1514)
    stock = load_scenario(ROOT / "scenarios/validate.yaml").with_overrides({"ns3.twin": []})
    assert wire_payload_share(stock) == pytest.approx(1448 / 1490)
    for twin in (["frames"], ["htb"]):
        assert wire_payload_share(stock.with_overrides({"ns3.twin": twin})) == \
            pytest.approx(1448 / 1514)
    with pytest.raises(ValueError, match="payload_share"):
        fit_capacity(3, samples, rate, 1.2)


@pytest.mark.parametrize("samples, message", [
    ([(1e9, 1.0)], "at least two sizes"),
    ([(1e9, 2.0), (2e9, 1.0)], "does not grow"),
])
def test_fit_rejects_samples_that_cannot_calibrate(samples, message):
    with pytest.raises(ValueError, match=message):
        fit_tier(2, samples, 1e9)


def spec():
    return load_scenario(ROOT / "scenarios" / "default.yaml").cluster.spec()


def test_pair_path_is_one_stable_shortest_path_and_pairs_spread_over_paths():
    s = spec()
    net = FluidNetwork(s, None)
    path = net.pair_path("i0", "i9")
    assert path in s.paths("i0", "i9")
    assert FluidNetwork(s, None).pair_path("i0", "i9") == path  # no randomness
    firsts = {tuple(net.pair_path(p.name, d.name))[1] for p in s.prefill_pool for d in s.decode_pool}
    assert len(firsts) > 1  # the address hash spreads pairs over the uplinks


def _row(request, path, start=0.0, size=1e9):
    nodes = [h[0] for h in path] + [path[-1][1]]
    return {"request": request, "shard": 0, "src": nodes[0], "dst": nodes[-1],
            "bytes": size, "start": start, "path": ">".join(nodes)}


def test_replay_follows_recorded_paths_and_applies_the_calibration():
    s = spec()
    paths = s.paths("i0", "i8")  # tier 3: several core paths
    disjoint = next(p for p in paths if p[2] != paths[0][2] and p[1] != paths[0][1])
    rate = gbps_to_bytes_per_s(s.tier_bandwidth_gbps[3])
    apart = replay_transfers(s, [_row("a", paths[0]), _row("b", disjoint)])
    together = replay_transfers(s, [_row("a", paths[0]), _row("b", paths[0])])
    assert [r["end"] for r in apart] == pytest.approx([1e9 / rate] * 2)
    assert [r["end"] for r in together] == pytest.approx([2e9 / rate] * 2)
    slower = replay_transfers(s, [_row("a", paths[0])], capacity_factor={3: 0.5})
    assert slower[0]["end"] == pytest.approx(2e9 / rate)
