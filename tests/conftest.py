from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "data" / "traces" / "mooncake_synthetic_trace.jsonl"


@pytest.fixture
def trace_path() -> Path:
    return TRACE


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
    import subprocess
    import sys

    target = tmp_path_factory.mktemp("plugins")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                           "--no-build-isolation", "--no-index", "--target", str(target),
                           str(P2C_PACKAGE)], capture_output=True, text=True, timeout=300)
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
