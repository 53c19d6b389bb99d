"""Network models in place of max-min: the built-ins' arithmetic on the fluid network's
lifecycle, plugins found and guarded as schedulers are, bad keys refused by name, and
other models judged against the same packets as the verdict's model."""

import json
import math
import random
import textwrap

import pytest
from click.testing import CliRunner

from testbed.cli import main
from testbed.flowsim.model_network import flow_network
from testbed.model.cost import gbps_to_bytes_per_s
from testbed.model.extensions import network_models as nm
from testbed.model.tcp import TcpParams
from testbed.scenario import Scenario, ScenarioError, load_scenario
from testbed.topologies.fattree import FatTreeSpec
from testbed.validate.engines.flow_replay import replay_transfers
from tests.conftest import TRACE, flow_validation

GB = 1e9


def spec() -> FatTreeSpec:
    return Scenario(name="n").cluster.spec()


TIER = 2  # the default fabric's prefill and decode pools meet at tiers 2 and 3


def pair(s: FatTreeSpec) -> tuple[str, str]:
    src = s.prefill_pool[0].name
    dst = next(d.name for d in s.decode_pool if s.tier(src, d.name) == TIER)
    return src, dst


def ends(model: str, transfers: list[tuple[float, float, int]], tcp=None) -> list[float]:
    """Each transfer (start, bytes, shards) from one prefill instance to one decode
    instance of its pod, on one path (per-pair ECMP); its shards' last end."""
    s = spec()
    src, dst = pair(s)
    rows = [{"request": f"r{i}", "shard": k, "src": src, "dst": dst, "bytes": size / n,
             "start": start} for i, (start, size, n) in enumerate(transfers)
            for k in range(n)]
    out = replay_transfers(s, rows, ecmp="per-pair", tcp=tcp, model=model)
    return [max(r["end"] for r in out if r["request"] == f"r{i}")
            for i in range(len(transfers))]


def nic() -> float:
    """The tier's bandwidth: every hop of the path has at least it."""
    return gbps_to_bytes_per_s(spec().tier_bandwidth_gbps[TIER])


def test_fixed_bandwidth_is_size_over_the_tiers_bandwidth_whatever_shares_the_link():
    one, two = ends("fixed-bandwidth", [(0.0, 8 * GB, 4), (0.0, 8 * GB, 4)])
    assert one == pytest.approx(8 * GB / nic()) and two == pytest.approx(one)
    # max-min: the two share the path's bottleneck and both take twice as long
    shared = ends("max-min", [(0.0, 8 * GB, 4), (0.0, 8 * GB, 4)])
    assert shared == pytest.approx([2 * one, 2 * one])


def test_a_replays_shards_arriving_one_by_one_are_one_transfer_at_the_tiers_bandwidth():
    (alone,) = ends("fixed-bandwidth", [(0.0, 8 * GB, 4)])
    assert alone == pytest.approx(8 * GB / nic())  # not four transfers at the full rate


def test_the_fair_share_is_taken_once_at_the_start_and_never_re_shared():
    first, second = ends("fixed-bandwidth-fair", [(0.0, 8 * GB, 1), (0.1, 8 * GB, 1)])
    alone = 8 * GB / nic()
    assert first == pytest.approx(alone)  # alone when it started: never slowed down
    assert second == pytest.approx(0.1 + 2 * alone)  # half, even after the first left


def test_latency_bandwidth_adds_the_connections_round_trips():
    tcp = TcpParams(mss_bytes=1448.0, handshake_rtts=1.0, tail_rtts=1.0)
    (plain,) = ends("fixed-bandwidth", [(0.0, 1 * GB, 1)], tcp)
    (base,) = ends("latency-bandwidth", [(0.0, 1 * GB, 1)], tcp)
    s = spec()
    net = flow_network(s, random.Random(0), None, tcp, 0.0, "latency-bandwidth")
    src, dst = pair(s)
    (path,) = net.transfer_paths(src, dst, "per-pair", 1)
    from testbed.model.tcp import path_rtt

    rtt = path_rtt(s.tier_latency_us[TIER] * 1e-6, [net.links[h].capacity for h in path], tcp)
    assert base - plain == pytest.approx(2 * rtt) and rtt > 0


PLUGIN = '''
from testbed import NetworkModel


class Half(NetworkModel):
    name = "half"

    def transfer_time(self, transfer, sharing):
        return 2 * transfer.bytes / transfer.bandwidth


class Raises(NetworkModel):
    def transfer_time(self, transfer, sharing):
        raise ZeroDivisionError("on purpose")


class NotANumber(NetworkModel):
    def transfer_time(self, transfer, sharing):
        return float("nan")


class TooLarge(NetworkModel):
    def transfer_time(self, transfer, sharing):
        return 10**400  # an int no float holds


class NoMethod(NetworkModel):
    pass


class Unrelated:
    pass
'''


@pytest.fixture
def mymodels(tmp_path, monkeypatch):
    (tmp_path / "mymodels.py").write_text(textwrap.dedent(PLUGIN))
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(0)\n")  # on import
    monkeypatch.syspath_prepend(str(tmp_path))
    nm.resolve.cache_clear()
    yield "mymodels"
    nm.resolve.cache_clear()


def _run(model: str):
    from testbed.flowsim.simulator import simulate
    from testbed.runner import _workload

    sc = Scenario(name="m", workload={"trace": str(TRACE), "measure_s": 3.0},
                  network={"model": model})
    cell = sc.points()[0][1]
    return simulate(cell, "netkv-full", 1, _workload(cell, 1))


def test_a_plugin_times_transfers_and_a_failing_one_is_replaced_by_fixed_bandwidth(mymodels):
    fixed, half = _run("fixed-bandwidth"), _run("mymodels:Half")
    assert "network_model_faults" not in fixed.counters  # built-ins are not guarded
    assert half.counters["network_model_faults"]["total"] == 0
    took = {(t["request"], t["shard"]): t["end"] - t["start"] for t in fixed.transfers}
    slow = [t["end"] - t["start"] for t in half.transfers if (t["request"], t["shard"]) in took]
    assert slow and sum(slow) > 1.5 * sum(took.values())
    for key, kind in (("Raises", "raised"), ("NotANumber", "bad_return"),
                      ("TooLarge", "bad_return")):
        got = _run(f"mymodels:{key}")
        faults = got.counters["network_model_faults"]
        assert faults[kind] == faults["total"] > 0
        # every transfer timed by fixed-bandwidth instead: the same run
        assert [r["ttft"] for r in got.requests] == [r["ttft"] for r in fixed.requests]
    assert nm.display_name("mymodels:Half") == "half"


@pytest.mark.parametrize("key,says", [
    ("nosuch", "unknown network model 'nosuch'"),
    ("nosuchmodule:X", "no module named 'nosuchmodule'"),
    ("mymodels:Missing", "has no 'Missing'"),
    ("mymodels:Unrelated", "is not a network model class"),
    ("mymodels:NoMethod", "does not implement transfer_time()"),
    ("exits:X", "importing exits raised SystemExit"),
])
def test_a_bad_network_model_key_is_refused_when_the_scenario_loads(mymodels, write_scenario,
                                                                     key, says):
    path = write_scenario(f"name: bad\nnetwork:\n  model: '{key}'\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert "network.model" in str(err.value) and says in str(err.value)
    done = CliRunner().invoke(main, ["simulate", str(path)])
    assert done.exit_code == 2 and says in done.output


def test_other_models_are_judged_with_the_verdicts_statistics(tmp_path):
    base = Scenario(name="fm", workload={"trace": str(TRACE), "measure_s": 4.0},
                    schedulers=["rr", "netkv-full"], network={"ecmp": "per-pair"})
    folder = flow_validation(tmp_path / "fm-validate-x", base)  # a flow run for packets
    done = CliRunner().invoke(main, ["judge", str(folder), "--flow-model", "fixed-bandwidth",
                                     "--flow-model", "nosuch"])
    assert done.exit_code == 2 and "unknown network model 'nosuch'" in done.output
    assert not (folder / "comparison.json").exists()  # nothing judged
    assert CliRunner().invoke(main, ["judge", str(folder)]).exit_code == 0
    done = CliRunner().invoke(main, ["judge", str(folder), "--flow-model", "fixed-bandwidth",
                                     "--flow-model", "latency-bandwidth-fair"])
    assert done.exit_code == 0, done.output
    doc = json.loads((folder / "comparison.json").read_text())
    rows = {r["model"]: r for r in doc["flow_models"]["models"]}
    assert list(rows) == ["max-min", "fixed-bandwidth", "latency-bandwidth-fair"]
    mine = rows["max-min"]["targets"]
    for key in ("replay_median_abs_transfer_error", "replay_p90_abs_transfer_error",
                "engines_median_abs_transfer_error", "gain_verdicts", "ttft_verdicts"):
        assert mine[key] == doc["targets"][key], key  # the verdict's own figures, anew
    fixed = rows["fixed-bandwidth"]["targets"]
    assert not math.isclose(fixed["replay_median_abs_transfer_error"],
                            mine["replay_median_abs_transfer_error"])
    assert "Flow models against packets" in done.output
    assert any(line.startswith("fixed-bandwidth ") for line in done.output.splitlines())
    assert "## Flow models" in (folder / "report.md").read_text()
    # judged again, the models it was judged with are judged again too
    assert CliRunner().invoke(main, ["judge", str(folder)]).exit_code == 0
    again = json.loads((folder / "comparison.json").read_text())
    assert [r["model"] for r in again["flow_models"]["models"]] == list(rows)
    assert again["flow_models"]["models"][1]["targets"] == fixed


def test_a_model_that_fell_back_is_said_on_the_terminal(mymodels, write_scenario):
    path = write_scenario("name: fb\nworkload: {trace: TRACE, measure_s: 3}\n"
                          "schedulers: [rr]\nseeds: 1\nnetwork: {model: 'mymodels:TooLarge'}\n")
    done = CliRunner().invoke(main, ["simulate", str(path), "--out",
                                     str(path.parent / "out"), "--jobs", "1"])
    assert done.exit_code == 0, done.output
    said = " ".join(done.output.split())
    assert "network model mymodels:TooLarge" in said and "not the model's alone" in said
    (folder,) = (path.parent / "out").glob("fb-flowsim-*")
    assert "timed by fixed-bandwidth instead" in (folder / "table.md").read_text()
