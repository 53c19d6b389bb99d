"""Mooncake reader, profiles, compression, overrides, synthetic generator."""

import random

import pytest

from testbed.workloads import synthetic
from testbed.workloads.mooncake import TraceError, read_trace
from testbed.workloads.profiles import (
    PROFILES,
    apply_sharing,
    compress,
    filter_profile,
    natural_rate,
    override_length,
)


def test_shipped_trace_reads_whole(trace_path):
    reqs = read_trace(trace_path)
    assert len(reqs) == 3993
    assert reqs[0].input_len == 40160 and reqs[0].arrival_s == 0.0
    assert all(len(r.hash_ids) * 512 >= r.input_len for r in reqs)


@pytest.mark.parametrize("line, expected", [
    ("{not json", "not valid JSON"),
    ('{"timestamp": 5, "output_length": 1, "hash_ids": [1]}', "missing field 'input_length'"),
    ('{"timestamp": -1, "input_length": 10, "output_length": 1, "hash_ids": [1]}',
     "field 'timestamp'"),
    ('{"timestamp": 5, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2]}',
     "field 'hash_ids' has 2 ids but input_length 1025 needs 3"),
    ('{"timestamp": 5, "input_length": 10, "output_length": "x", "hash_ids": [1]}',
     "field 'output_length'"),
    ("[1, 2]", "expected a JSON object"),
])
def test_malformed_lines_name_the_line_and_field(tmp_path, line, expected):
    path = tmp_path / "t.jsonl"
    good = '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}'
    path.write_text(good + "\n" + line + "\n")
    with pytest.raises(TraceError) as err:
        read_trace(path)
    assert f"{path}:2" in str(err.value) and expected in str(err.value)


def test_missing_and_empty_traces(tmp_path):
    with pytest.raises(TraceError, match="not found"):
        read_trace(tmp_path / "nope.jsonl")
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(TraceError, match="no requests"):
        read_trace(tmp_path / "e.jsonl")


def test_profiles_filter_lengths(trace_path):
    reqs = read_trace(trace_path)
    rag = filter_profile(reqs, PROFILES["rag"])
    assert rag and all(4096 <= r.input_len <= 65536 for r in rag)
    assert all(r.input_len <= 8192 for r in filter_profile(reqs, PROFILES["chatbot"]))
    assert all(r.input_len > 16384 for r in filter_profile(reqs, PROFILES["long-context"]))
    assert (PROFILES["rag"].p_share, PROFILES["rag"].slo_s) == (0.7, 5.0)


def test_compression_reaches_the_target_rate(trace_path):
    reqs = filter_profile(read_trace(trace_path), PROFILES["rag"])
    out = compress(reqs, target_rps=5.0, offset_s=60.0, duration_s=40.0)
    assert out[0].arrival_s >= 0 and out[-1].arrival_s < 40.0
    assert len(out) / 40.0 == pytest.approx(5.0, rel=0.25)
    # one factor for all: gaps keep their proportions
    base = [r for r in reqs if r.arrival_s >= 60.0][:5]
    ratio = (out[2].arrival_s - out[1].arrival_s) / (base[2].arrival_s - base[1].arrival_s)
    assert ratio == pytest.approx(natural_rate(reqs) / 5.0)


def test_length_override_keeps_shared_heads(trace_path):
    reqs = read_trace(trace_path)[:50]
    fixed = override_length(reqs, 16384)
    assert all(r.input_len == 16384 and len(r.hash_ids) == 32 for r in fixed)
    assert fixed[0].hash_ids[:10] == reqs[0].hash_ids[:10]


def test_p_share_zero_removes_all_sharing(trace_path):
    reqs = read_trace(trace_path)[:400]
    cold = apply_sharing(reqs, 0.0, random.Random(1))
    ids = [h for r in cold for h in r.hash_ids]
    assert len(ids) == len(set(ids))
    assert apply_sharing(reqs, 1.0, random.Random(1)) == reqs


def test_synthetic_generator_is_seeded_and_shares_prefixes():
    args = dict(rate_rps=20.0, duration_s=10.0, mean_input=4000, sigma_input=0.5, mean_output=50)
    a = synthetic.generate(random.Random(7), **args, p_share=0.8)
    b = synthetic.generate(random.Random(7), **args, p_share=0.8)
    assert a == b and 120 < len(a) < 280
    firsts = [r.hash_ids[0] for r in a]
    assert len(set(firsts)) < len(firsts)  # shared documents
    none = synthetic.generate(random.Random(7), **args, p_share=0.0)
    assert len({r.hash_ids[0] for r in none}) == len(none)


def test_slo_mix_draws_each_requests_slo_by_its_id(write_scenario):
    from collections import Counter

    from testbed.scenario import ScenarioError, load_scenario
    from testbed.workloads.build import build_workload, request_slo

    sc = load_scenario(write_scenario(
        "name: m\nworkload: {trace: TRACE, profile: rag, slo_mix: [[0.3, 3.0], [0.7, 8.0]]}\n"))
    wl = build_workload(sc, sc.seed)
    draws = Counter(request_slo(5.0, [[0.3, 3.0], [0.7, 8.0]], f"r{k}") for k in range(4000))
    assert set(draws) == {3.0, 8.0} and 0.27 < draws[3.0] / 4000 < 0.33
    assert all(wl.slo_for(r.request_id) in (3.0, 8.0) for r in wl.requests)
    assert wl.slo_for("r1") == request_slo(5.0, [[0.3, 3.0], [0.7, 8.0]], "r1")  # stable
    assert request_slo(5.0, None, "r1") == 5.0
    try:
        load_scenario(write_scenario("name: b\nworkload: {trace: TRACE, slo_mix: [[0.5, 3.0]]}\n",
                                     "bad.yaml"))
    except ScenarioError as exc:
        assert "shares sum to 0.5" in str(exc)
    else:
        raise AssertionError("a mix that does not sum to 1 must be refused")


def test_a_looped_trace_is_the_eager_replay_made_lazily(trace_path):
    """LoopedTrace yields, indexes and counts exactly the list of replays appended one
    after another (ids shifted per replay), without building it."""
    from dataclasses import replace

    from testbed.workloads.build import LoopedTrace, load_trace

    trace = load_trace(str(trace_path))[:50]
    until = trace[-1].arrival_s * 3.5
    period = trace[-1].arrival_s - trace[0].arrival_s + \
        (trace[-1].arrival_s - trace[0].arrival_s) / (len(trace) - 1)
    shift = 1 + max(max(r.hash_ids) for r in trace)
    eager, k = list(trace), 1
    while eager[-1].arrival_s < until:
        eager += [replace(r, request_id=f"{r.request_id}.{k}", arrival_s=r.arrival_s + k * period,
                          hash_ids=tuple(h + k * shift for h in r.hash_ids)) for r in trace]
        k += 1
    looped = LoopedTrace(trace, until)
    assert len(looped) == len(eager) and list(looped) == eager
    assert looped[-1] == eager[-1] and looped[0] == eager[0] and looped[77] == eager[77]


def test_seed_segments_give_each_seed_its_own_stretch_of_the_trace(trace_path):
    from testbed.scenario import Scenario
    from testbed.workloads.build import build_workload

    def arrivals(sc, seed):
        return [(r.request_id, r.input_len) for r in build_workload(sc, seed).requests]

    base = {"name": "s", "seed": 1, "workload": {"trace": str(trace_path), "warmup_s": 2,
                                                  "measure_s": 8}}
    plain = Scenario.model_validate(base)
    seg = plain.with_overrides({"workload.seed_segments": True})
    # without it, seeds share the trace's requests; with it the first seed is unchanged
    # and the next starts where the first window ended
    assert [i for i, _ in arrivals(plain, 2)] == [i for i, _ in arrivals(plain, 1)]
    assert arrivals(seg, 1) == arrivals(plain, 1)
    one, two = arrivals(seg, 1), arrivals(seg, 2)
    assert not {i for i, _ in one} & {i for i, _ in two}
    later = plain.with_overrides({"workload.trace_offset_s": plain.workload.trace_offset_s
                                  + (build_workload(plain, 1).rate_rps * 10
                                     / _trace_rate(plain))})
    assert [i for i, _ in two] == [i for i, _ in arrivals(later, 1)]


def _trace_rate(sc):
    from testbed.workloads.build import _profile_trace, _rate

    return _rate(_profile_trace(sc), sc.workload.trace)


def test_seeds_past_the_segments_replay_them_as_draws(trace_path):
    from testbed.scenario import Scenario
    from testbed.workloads.build import build_workload, seed_groups, workload_seed

    sc = Scenario.model_validate({"name": "s", "seed": 3, "seeds": 7, "workload": {
        "trace": str(trace_path), "warmup_s": 2, "measure_s": 8, "seed_segments": True,
        "p_share": 0.5, "segments": 3}})
    assert [workload_seed(sc, k) for k in range(3, 10)] == [3, 4, 5, 3, 4, 5, 3]
    assert seed_groups(sc) == {k: 3 + (k - 3) % 3 for k in range(3, 10)}
    assert seed_groups(sc.with_overrides({"workload.segments": None})) is None
    # a draw is the same requests, lengths and prefix sharing as its segment's first seed
    assert build_workload(sc, 6).requests == build_workload(sc, 3).requests
    assert build_workload(sc, 7).requests != build_workload(sc, 6).requests
