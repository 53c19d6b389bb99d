"""The ns-3 engine's tests need the `ns3` wheel and a C++ compiler (./run.sh setup
installs both); without them a developer sees these tests skipped with the reason, and
under CI (CI=true) they fail with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import skip_or_fail_without

HERE = Path(__file__).parent


def missing() -> str | None:
    from testbed.ns3sim import program as kvnet

    try:
        kvnet.program_path()
    except kvnet.Ns3Unavailable as exc:
        return str(exc).splitlines()[0]
    return None


def pytest_collection_modifyitems(config, items):
    skip_or_fail_without(items, HERE, "ns-3 test", missing())


@pytest.fixture(scope="session")
def program() -> Path:
    from testbed.ns3sim import program as kvnet

    return kvnet.program_path()
