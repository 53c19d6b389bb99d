"""Real Mininet + Open vSwitch + controller fixtures. Needs root; CI runs them as root.

A developer without root or Open vSwitch sees every test here skipped with the reason.
Under CI (CI=true) a missing prerequisite fails the tests instead: an install step that
went missing must not turn into a green run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from testbed.scenario import load_scenario
from tests.conftest import skip_or_fail_without

# A machine much slower than this one (a VM under software emulation) runs the same
# tests at a lower scale (every link rate in proportion) and with longer waits:
# NETKV_TEST_SCALE (default 0.0002), NETKV_TEST_SLOWDOWN (wait_for limits and the
# workers' start timeout x this).
SCALE = float(os.environ.get("NETKV_TEST_SCALE", "0.0002"))
SLOWDOWN = float(os.environ.get("NETKV_TEST_SLOWDOWN", "1"))
SMALL = """
name: fabric-test
workload: {{trace: {trace}}}
cluster: {{gpus_per_server: 4, aggs_per_pod: 2, cores_per_agg: 1}}
network: {{ecmp: per-flow}}
emulation: {{scale: SCALE, poll_s: 0.5, start_timeout_s: START}}
""".replace("SCALE", f"{SCALE:g}").replace("START", f"{120 * SLOWDOWN:g}")


def missing_prerequisite() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, Open vSwitch, tc)"
    for tool in ("ovs-vsctl", "iperf3", "tcpdump", "mnexec"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (./run.sh setup installs it)"
    ok = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True).returncode
    if ok != 0:
        return "Open vSwitch is not running (./run.sh setup starts it)"
    return None


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:  # every test here builds real namespaces: root, and run alone
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.root)
    skip_or_fail_without(items, here, "emulation test", missing_prerequisite())


def requests_ended(results: Path) -> int:
    """Requests ended so far in the cell `testbed emulate --out results` is running (its
    router's live view); 0 before it starts."""
    for live in results.glob("*/cells/*/*/seed*/live.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            return int(json.loads(live.read_text())["ended"])
    return 0


def write_small(tmp: Path, trace: Path, extra: dict | None = None) -> Path:
    path = tmp / "scenario.yaml"
    data = yaml.safe_load(SMALL.format(trace=trace))
    for dotted, value in (extra or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    path.write_text(yaml.safe_dump(data))
    return path


def running_fabric(tmp_path_factory, extra: dict | None = None):
    """An emulated fabric for a test module: 8 hosts, 10 switches, 2 core paths."""
    from testbed.emulation.net import EmulatedNetwork
    from tests.conftest import TRACE

    tmp = tmp_path_factory.mktemp("fabric")
    path = write_small(tmp, TRACE, extra)
    sc = load_scenario(path)
    network = EmulatedNetwork(sc, path, tmp / "run")
    network.start()
    try:
        yield network
    finally:
        network.stop()


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    yield from running_fabric(tmp_path_factory)


def wait_for(check, timeout: float, what: str, interval: float = 0.2):
    timeout *= SLOWDOWN
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture(scope="session", autouse=True)
def no_leftovers_from_before_the_suite():
    """An emulation killed before the suite started (a crash, a machine restart in the
    middle of a run) leaves bridges that would make every test here refuse to start: the
    suite removes them once, says so, and then each test proves its own cleanup."""
    if missing_prerequisite() is not None:
        yield
        return
    from testbed.emulation import cleanup

    left = cleanup.find_leftovers()
    if not left.empty:
        import warnings

        warnings.warn(f"leftovers of a run before the test suite removed: {left.describe()}",
                      stacklevel=1)
        cleanup.clean()
    yield
