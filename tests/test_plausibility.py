"""Physical bounds (testbed/plausibility.py): the limit itself passes, just past it fails."""

import pytest
from pydantic import ValidationError

from testbed.plausibility import fabric_problems, memory_problems
from testbed.scenario import Scenario
from tests.conftest import TRACE


def test_each_fabric_bound_sits_at_the_hardware_it_names():
    assert fabric_problems(1600, 14_400, 1.0, 1.001) == []
    assert fabric_problems(1600, 14_400, 1.0, 1.0) == []  # 1: no oversubscription at all
    got = fabric_problems(1601, 14_401, 1.0005, 4.0)
    assert [p.split(":")[0] for p in got] == ["cluster.host_gbps", "cluster.nvlink_gbps",
                                              "cluster.tor_oversubscription"]


def test_memory_must_hold_one_token_and_the_smallest_request():
    per_token = 327_680.0  # Llama-3-70B
    assert memory_problems(per_token, 180e9, 2e9, 4096) == []
    exact = per_token * 4096
    assert memory_problems(per_token, exact + 1e9, 1e9, 4096) == []
    assert "smallest request" in memory_problems(per_token, exact + 1e9 - 1, 1e9, 4096)[0]
    assert "one token" in memory_problems(per_token, per_token - 1, 0.0, 1)[0]


def test_the_smallest_request_is_the_workloads_own():
    # 0.5 GB usable holds 1,525 tokens: a fixed 1,000-token workload fits, RAG's 4,096 not
    Scenario(name="a", workload={"trace": str(TRACE), "input_length": 1000},
             cluster={"memory_gb": 1.0, "memory_reserve_gb": 0.5})
    with pytest.raises(ValidationError, match="4,096 tokens"):
        Scenario(name="a", workload={"trace": str(TRACE)},
                 cluster={"memory_gb": 1.0, "memory_reserve_gb": 0.5})
