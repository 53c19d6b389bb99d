"""Link contention in the flow model's TCP terms: the term, its effect on transfers that
share a path, and its fit from the calibration's competing probes (pure)."""

from __future__ import annotations

import copy
import json

import pytest

from testbed.model import tcp
from testbed.scenario import load_scenario
from testbed.validate.engines.contention import (
    competing_residuals,
    join_stall,
    last_ends,
    probe_ends,
    with_probe_fits,
)
from testbed.validate.engines.flow_replay import replay_transfers
from testbed.validate.judging import model_errors
from testbed.validate.judging.calibration import fit_contention
from tests.conftest import ROOT
from tests.test_tcp_model import _shard_rows, pair_at, path_text

SCENARIO = ROOT / "scenarios" / "validate.yaml"
NO_START = dict(mss_bytes=1.0, init_cwnd=1e12, handshake_rtts=0, tail_rtts=0)


@pytest.fixture(scope="module")
def sc():
    return load_scenario(SCENARIO)


def test_only_the_time_lost_to_competitors_is_stretched():
    assert tcp.contention_delay(1.0, 1.0, 0.3) == 0.0
    assert tcp.contention_delay(0.8, 1.0, 0.3) == 0.0  # sooner than alone: nothing lost
    assert tcp.contention_delay(3.0, 1.0, 0.5) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="contention_idle"):
        tcp.TcpParams(**NO_START, contention_idle=0.95)


def test_competing_transfers_end_later_by_their_lost_time_a_lone_one_does_not(sc):
    spec = sc.cluster.spec()
    a, b = pair_at(spec, 2)
    path = path_text(spec.paths(a, b)[0])
    lone = _shard_rows("x", a, b, path, 2e9, 4, 0.0)
    pair = lone + _shard_rows("y", a, b, path, 2e9, 4, 0.0)

    def ends(rows, idle):
        out = replay_transfers(spec, rows, tcp=tcp.TcpParams(**NO_START, contention_idle=idle))
        return {w["request"]: w["end"] for w in model_errors.whole_transfers(out)}

    # the shards of one transfer do not compete with each other
    assert ends(lone, 0.4)["x"] == pytest.approx(ends(lone, 0.0)["x"])
    # two together: each took 2 S / C where alone it takes S / C; the lost S / C
    # stretches by 1 / (1 - 0.4)
    alone = ends(lone, 0.0)["x"]
    both = ends(pair, 0.4)
    assert both["x"] == pytest.approx(both["y"])
    assert both["x"] == pytest.approx(2 * alone + 0.4 / 0.6 * alone)
    # one starting after the other ended: never together, nothing lost
    later = lone + _shard_rows("y", a, b, path, 2e9, 4, 10 * alone)
    assert ends(later, 0.4)["y"] == pytest.approx(ends(later, 0.0)["y"])
    # the rates are the fluid model's: a third transfer arriving while the first two are
    # delayed sees the link free once their bytes are out
    third = pair + _shard_rows("z", a, b, path, 2e9, 4, 2 * alone)
    assert ends(third, 0.4)["z"] == pytest.approx(3 * alone)


def test_the_fit_recovers_the_idle_share_that_made_the_probes(sc):
    """Probes 'measured' by the model itself at idle 0.3 (together and spaced, three
    sizes, every tier) give back 0.3; a probe the model already ends late counts as 0 and
    one slower than the bound as the bound, and the median keeps one such outlier out."""
    factors = {1: 0.95, 2: 0.95, 3: 0.95}
    fit = {"serialisation": 0.5, "hop_delay_s": 3e-4, "shard_spread": 0.0}
    last_end = last_ends(sc, factors, fit, 4)
    probes = [(tier, size, starts) for tier in (1, 2, 3) for size, starts in
              ((0.5e9, [0.0, 0.0]), (0.5e9, [0.0] * 4), (2e9, [0.0, 0.0]),
               (0.5e9, [0.0, 0.05, 0.1, 0.15]))]
    made = [(last_end(0.3, *p), (lambda idle, p=p: last_end(idle, *p))) for p in probes]
    got = fit_contention(made)
    assert got["contention_idle"] == pytest.approx(0.3, abs=1e-3)
    assert len(got["contention_estimates"]) == len(probes)
    early = (0.5 * made[0][0], made[0][1])  # packets faster than the model without the term
    stalled = (100 * made[1][0], made[1][1])
    assert fit_contention([early])["contention_idle"] == 0.0
    assert fit_contention([stalled])["contention_idle"] == tcp.MAX_CONTENTION_IDLE
    assert fit_contention(made + [early, stalled])["contention_idle"] == \
        pytest.approx(0.3, abs=1e-3)
    assert fit_contention([])["contention_idle"] == 0.0


def test_the_join_stall_fit_recovers_the_stall_that_made_the_staggered_probes(sc):
    """Staggered probes 'measured' by the model itself with a 0.2 s join stall (every
    tier, 2 and 4 transfers) give back 0.2 s from their first arrivals; probes started
    together have no newcomer and are not used."""
    factors = {1: 0.95, 2: 0.95, 3: 0.95}
    fit = {"serialisation": 0.5, "hop_delay_s": 3e-4, "shard_spread": 0.0}
    ends = probe_ends(sc, factors, fit, 4)
    # large enough that the incumbent still sends when the stall ends: past that, a
    # longer stall changes nothing and the probe bounds it only from below
    lone = {tier: ends(0.0, tier, 8e9, [0.0])[0] for tier in (1, 2, 3)}
    probes = [(tier, 8e9, [k * 0.2 * lone[tier] for k in range(n)]) for tier in (1, 2, 3)
              for n in (2, 4)]  # a fifth of a lone transfer apart
    raw = {str(t): {"competing": []} for t in (1, 2, 3)}
    for tier, size, starts in probes:
        made = ends(0.0, tier, size, starts, 0.2)
        raw[str(tier)]["competing"].append(
            {"bytes": size, "starts": starts,
             "seconds": [e - s for e, s in zip(made, starts, strict=True)]})
    for jitter in (0.0, 3e-4):  # together (the senders' launch apart): no newcomer
        raw["1"]["competing"].append({"bytes": 0.5e9, "starts": [0.0, jitter],
                                      "seconds": [0.2, 9.0]})
    # small transfers asked together whose launch drifted more than 5% of their time
    # apart: together, as asked (a calibration from before the field reads them spaced)
    drifted = {"bytes": 0.032e9, "starts": [0.0, 1e-3], "seconds": [0.01, 0.01]}
    raw["2"]["competing"].append({**drifted, "asked_spacing_s": 0.0})
    got = join_stall(sc, factors, fit, raw, 4)
    assert got["join_stall_s"] == pytest.approx(0.2, rel=1e-3)
    assert len(got["join_stall_estimates"]) == len(probes)
    for probe in raw["2"]["competing"][:-1]:  # spaced as asked, whatever they measured
        probe["asked_spacing_s"] = 0.2
    assert len(join_stall(sc, factors, fit, raw, 4)["join_stall_estimates"]) == len(probes)
    raw["2"]["competing"][-1].pop("asked_spacing_s")
    assert len(join_stall(sc, factors, fit, raw, 4)["join_stall_estimates"]) == len(probes) + 1
    # the incumbent ends sooner; the newcomer, last on a link kept busy, when it would have
    stalled, plain = ends(0.0, 2, 2e9, [0.0, 0.05], 0.2), ends(0.0, 2, 2e9, [0.0, 0.05])
    assert stalled[0] < plain[0] and stalled[1] == pytest.approx(plain[1])
    assert join_stall(sc, factors, fit, {"1": {"competing": []}}, 4)["join_stall_s"] == 0.0
    # an incumbent as fast as alone (or faster: the packets' noise) bounds the stall from
    # below only: the least stall that leaves it alone, not the probe's whole span
    (tier, size, starts), alone = probes[0], lone[1]
    for measured in (alone, 0.9 * alone):
        raw = {"1": {"competing": [{"bytes": size, "starts": starts,
                                    "seconds": [measured, 9.0]}]}}
        least = join_stall(sc, factors, fit, raw, 4)["join_stall_s"]
        assert ends(0.0, 1, size, starts, least)[0] == pytest.approx(alone)
        assert ends(0.0, 1, size, starts, 0.9 * least)[0] > alone * (1 + 1e-6)


def test_an_old_calibration_is_fitted_anew_from_its_own_probes(sc):
    """A calibration taken before the term (no contention_idle, probes without starts)
    gets the fit and per-probe residuals with and without it; one that has it is kept."""
    cal = json.loads((ROOT / "tests" / "data" / "calibration-no-contention.json").read_text())
    assert "contention_idle" not in cal["tcp"]
    got = with_probe_fits(sc, copy.deepcopy(cal))
    idle = got["tcp"]["contention_idle"]
    assert 0.0 < idle <= tcp.MAX_CONTENTION_IDLE
    lone = [c for c in got["competing"] if c["competing"] == 1]
    shared = [c for c in got["competing"] if c["competing"] > 1]
    assert lone and all(c["contended_error"] == c["tcp_error"] for c in lone)
    assert all(c["contended_error"] > c["tcp_error"] for c in shared)
    # the term narrows the error on the shared probes it was fitted on (median |error|)
    def med(key):
        return sorted(abs(c[key]) for c in shared)[len(shared) // 2]
    assert med("contended_error") < med("tcp_error")
    assert with_probe_fits(sc, got) is got
    factors = {int(k): v for k, v in cal["capacity_factor"].items()}
    again = competing_residuals(sc, factors, got["tcp"], got["tiers"], 4)
    assert again == got["competing"]
    # its lone transfers' shards, if it had recorded them, give the spread again
    lone = [{"bytes": 0.5e9, "seconds": 0.2, "shards": [
        0.01 + 0.19 * x for x in tcp.lone_shard_ends(4, 0.25)]}] * 3
    tiers = {t: {**v, "overhead_s": 0.01, "samples": lone} for t, v in got["tiers"].items()}
    with_lone = {**got, "tiers": tiers,
                 "tcp": {k: v for k, v in got["tcp"].items() if k != "probe_fits"}}
    assert with_probe_fits(sc, with_lone)["tcp"]["shard_spread"] == pytest.approx(0.25)
    # fitted for another flow model (no marker): fitted again, whatever it held
    stale = {**got, "tcp": {k: v for k, v in got["tcp"].items() if k != "probe_fits"}}
    stale["tcp"].update(contention_idle=0.01, join_stall_s=9.9)
    refit = with_probe_fits(sc, stale)["tcp"]
    for name in ("contention_idle", "join_stall_s", "probe_fits"):
        assert refit[name] == got["tcp"][name]


def test_each_probe_transfer_is_judged_in_arrival_order(sc):
    """Spaced probes 'measured' by the model itself are exact transfer by transfer; where
    the packets let the first arrival finish in half the model's time, the first error
    says +100% and the others are untouched."""
    factors = {1: 0.95, 2: 0.95, 3: 0.95}
    fit = {"serialisation": 0.5, "hop_delay_s": 3e-4, "shard_spread": 0.0}
    ends = probe_ends(sc, factors, fit, 4)
    starts = [0.1, 0.0, 0.05]  # listed out of order: the second listed arrived first
    made = ends(0.0, 2, 0.5e9, starts)
    seconds = [e - s for e, s in zip(made, starts, strict=True)]
    assert max(made) == last_ends(sc, factors, fit, 4)(0.0, 2, 0.5e9, starts)
    assert seconds[1] < seconds[2] and seconds[1] < seconds[0]  # shared from 0.05 on

    def residual(secs):
        raw = {"2": {"competing": [{"bytes": 0.5e9, "starts": starts, "seconds": secs}]}}
        return competing_residuals(sc, factors, fit, raw, 4)[0]["by_arrival"]

    assert residual(seconds) == pytest.approx([0.0, 0.0, 0.0], abs=1e-9)
    faster = list(seconds)
    faster[1] /= 2
    assert residual(faster) == pytest.approx([1.0, 0.0, 0.0], abs=1e-9)


def test_through_the_engine_a_probe_s_transfers_take_the_pair_s_lanes_in_turn(sc):
    # the engine's 4 lanes carry one transfer of 4 shards at a time: the first ends at a
    # lone one's time, the next a lone time after it; the pusher's share the path
    engine = sc.with_overrides({"emulation.kv_transport": "mooncake"})
    lone = probe_ends(sc, {}, None, 4)(0.0, 2, 1e9, [0.0])[0]
    shared = probe_ends(sc, {}, None, 4)(0.0, 2, 1e9, [0.0, 0.0])
    queued = probe_ends(engine, {}, None, 4)(0.0, 2, 1e9, [0.0, 0.0])
    assert shared == [pytest.approx(2 * lone)] * 2
    assert queued == [pytest.approx(lone), pytest.approx(2 * lone)]

