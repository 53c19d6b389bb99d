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
