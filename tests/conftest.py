import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "data" / "traces" / "mooncake_synthetic_trace.jsonl"


@pytest.fixture
def trace_path() -> Path:
    return TRACE


def flow_validation(folder: Path, scenario) -> Path:
    """A finished validation folder whose packets run is a flow run standing in for it
    (`<name>-emulation-x`), with its scenario and a neutral calibration: what `testbed
    judge` reads, without root."""
    import json

    import yaml

    from testbed.runner import run_simulated

    folder.mkdir()
    run_simulated(scenario, folder).folder.rename(folder / f"{scenario.name}-emulation-x")
    (folder / "scenario.yaml").write_text(yaml.safe_dump(scenario.model_dump(mode="json")))
    (folder / "calibration.json").write_text(json.dumps(
        {"capacity_factor": {"1": 1.0, "2": 1.0, "3": 1.0}, "scale": 2e-4, "time_dilation": 1,
         "tiers": {}}))
    return folder


@pytest.fixture
def write_scenario(tmp_path):
    """Write a YAML scenario into tmp_path and return its path."""

    def _write(text: str, name: str = "s.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text.replace("TRACE", str(TRACE)))
        return path

    return _write


PLUGINS = ROOT / "tests" / "plugins"  # faulty_plugins: schedulers that misbehave on purpose
P2C_PACKAGE = ROOT / "examples" / "p2c_plugin"


@pytest.fixture(scope="session")
def plugin_path(tmp_path_factory) -> str:
    """The example plugin package, installed with pip as a user would (into a folder of
    its own, so the developer's environment is left alone), and the faulty plugins: a
    PYTHONPATH value. Its entry point makes `p2c` a scheduler key."""
    import shutil
    import subprocess
    import sys

    target = tmp_path_factory.mktemp("plugins")
    # built from a copy: pip builds in the source folder, and the suite's parallel workers
    # each install it (two builds in one folder race)
    source = shutil.copytree(P2C_PACKAGE, tmp_path_factory.mktemp("p2c-source") / "p2c",
                             ignore=shutil.ignore_patterns("build", "*.egg-info"))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                           "--no-build-isolation", "--no-index", "--target", str(target),
                           str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return f"{target}:{PLUGINS}"


@pytest.fixture
def with_plugins(plugin_path, monkeypatch) -> str:
    """plugin_path on this process's sys.path and in PYTHONPATH for the ones it starts."""
    import os

    for entry in reversed(plugin_path.split(":")):
        monkeypatch.syspath_prepend(entry)
    monkeypatch.setenv("PYTHONPATH", plugin_path + (
        ":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""))
    return plugin_path


def skip_or_fail_without(items, folder: Path, label: str, reason: str | None,
                         fail_under_ci: bool = True) -> None:
    """The tests under `folder` cannot run here for `reason` (None: they can): a developer
    sees them skipped with it; under CI (CI=true) they fail with it, so an install step
    that went missing cannot turn into a green run."""
    if reason is None:
        return
    for item in items:
        if Path(str(item.fspath)).is_relative_to(folder):
            if fail_under_ci and os.environ.get("CI"):
                item.user_properties.append(("missing", f"{label}: {reason}"))
            else:
                item.add_marker(pytest.mark.skip(reason=f"{label}: {reason}"))


def pytest_runtest_setup(item):
    # before any fixture runs: the test's own fixtures would fail less clearly
    missing = dict(item.user_properties).get("missing")
    if missing:
        pytest.fail(f"CI must run this test but {missing}", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def cache_dir(tmp_path_factory) -> Path:
    """The testbed's cache (calibrations, phase timings) in a folder of the session's,
    shared by the processes the tests start: the developer's own cache is left alone."""
    path = tmp_path_factory.mktemp("netkv-cache")
    os.environ["NETKV_CACHE_DIR"] = str(path)
    return path


_CONFIG: list = []  # pytest's config, for its terminal reporter


def pytest_configure(config):
    _CONFIG[:] = [config]


def pytest_runtest_logreport(report):
    """A failure's traceback at once, not only at the session's end (a CI run stopped
    at its time limit still says why a test failed); every test phase's duration into
    $NETKV_DURATIONS (run.sh prints the slowest over all of the suite's phases); the
    parallel workers' reports are written by the controller that collects them."""
    terminal = _CONFIG[0].pluginmanager.get_plugin("terminalreporter") if _CONFIG else None
    if report.failed and terminal is not None and not os.environ.get("PYTEST_XDIST_WORKER"):
        terminal.write_line(f"\nFAILED {report.nodeid} ({report.when}), "
                            f"at once:\n{report.longreprtext[-6000:]}", red=True)
    path = os.environ.get("NETKV_DURATIONS")
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import json

    with open(path, "a") as f:
        f.write(json.dumps({"test": report.nodeid, "when": report.when,
                            "seconds": round(report.duration, 3)}) + "\n")
