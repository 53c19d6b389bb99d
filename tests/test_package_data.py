"""What an installed wheel carries: every C++ source the testbed builds at run time (the
ns-3 program, the flow simulator's kernels) is named in pyproject.toml's package-data,
so an install that is not editable builds them too instead of falling back."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_cpp_source_is_package_data():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = data["tool"]["setuptools"]["package-data"]
    sources = sorted(p for ext in ("*.cc", "*.h") for p in (ROOT / "testbed").rglob(ext))
    assert sources  # the kernels and the ns-3 program
    missing = []
    for path in sources:
        parts = path.relative_to(ROOT).parts
        # the innermost package whose globs name the file, relative to that package
        covered = any(fnmatch("/".join(parts[i:]), pattern)
                      for i in range(1, len(parts))
                      for pattern in globs.get(".".join(parts[:i]), []))
        if not covered:
            missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"not in [tool.setuptools.package-data]: {missing}"
