"""The flow simulator's compiled max-min sharing: chosen by default, the Python one on
request or where it cannot be built (with a warning), and a whole run's records the same
under both to rounding (tests/test_maxmin.py holds the rates themselves to the
references)."""

from __future__ import annotations

import math
import random

import pytest

from testbed import native
from testbed.flowsim.compiled_sharing import SOURCE, NativeFluidNetwork
from testbed.flowsim.model_network import flow_network
from testbed.flowsim.network import FluidNetwork
from testbed.flowsim.simulator import simulate
from testbed.scenario import Scenario
from testbed.topologies.fattree import FatTreeSpec
from testbed.workloads.build import build_workload
from tests.conftest import TRACE


def test_the_compiled_sharing_is_the_default_and_the_python_one_on_request(monkeypatch):
    spec = FatTreeSpec()
    assert type(flow_network(spec, random.Random(0), None, None, 0.0)) is NativeFluidNetwork
    monkeypatch.setenv("NETKV_FLOWSIM_NATIVE", "0")
    assert type(flow_network(spec, random.Random(0), None, None, 0.0)) is FluidNetwork


def test_without_a_compiler_it_says_why_and_the_python_sharing_runs(monkeypatch, tmp_path,
                                                                    capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # nothing built yet
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    native.library.cache_clear()
    native.warn_once.cache_clear()
    try:
        with pytest.raises(native.NativeUnavailable, match="no-such-compiler"):
            native.library_path(SOURCE)
        net = flow_network(FatTreeSpec(), random.Random(0), None, None, 0.0)
        assert type(net) is FluidNetwork
        assert "shares bandwidth in Python" in capsys.readouterr().err
    finally:
        native.library.cache_clear()


@pytest.mark.parametrize("key", ["cla", "netkv-full"])
def test_a_run_gives_the_same_records_under_either_sharing(monkeypatch, key):
    sc = Scenario(name="both", workload={"trace": str(TRACE), "measure_s": 20.0, "load": 1.5},
                  cluster={"pods": 2})
    workload = build_workload(sc, 1)
    native = simulate(sc, key, 1, workload)
    monkeypatch.setenv("NETKV_FLOWSIM_NATIVE", "0")
    python = simulate(sc, key, 1, workload)
    assert len(native.requests) == len(python.requests) > 50
    by_id = {r["id"]: r for r in python.requests}
    for row in native.requests:
        other = by_id[row["id"]]
        assert row["decode"] == other["decode"], row["id"]
        for field in ("transfer_end", "first_token"):
            a, b = row[field], other[field]
            assert (a is None) == (b is None) and (a is None or math.isclose(a, b, rel_tol=1e-9,
                                                                             abs_tol=1e-9))
