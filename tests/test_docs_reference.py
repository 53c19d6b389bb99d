"""The reference pages say only what is true now: no calendar dates (a dated figure lives in
docs/log/, with its date), no module, file or `testbed` command that does not exist.

Reference pages are docs/*.md and docs/**/*.md outside docs/log/; the README is held to the
same names (modules, files, commands). Everything is read from the file system when the
test runs, so a module moved or a command renamed fails here until the page follows it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "testbed"
DOCS = ROOT / "docs"
README = ROOT / "README.md"
REFERENCE = sorted(p for p in DOCS.rglob("*.md") if "log" not in p.relative_to(DOCS).parts[:-1])
NAMED = [README, *REFERENCE]  # pages whose modules, files and commands must exist

DATE = re.compile(r"\b(19|20)\d{2}-[01]\d-[0-3]\d\b")
FENCE = re.compile(r"^([ \t]*)```(\w*)\n(.*?)^\1```", re.S | re.M)
SPAN = re.compile(r"`([^`]+)`")
# a relative path ending in a file name (a/b.py) or a folder (a/b/); `../x` is a link's business
PATH = re.compile(r"(?<![\w./<{*-])((?:[A-Za-z_][\w.-]*/)+(?:[\w.-]*\.[a-z]{1,5}\b)?)")
BARE = re.compile(r"`([A-Za-z_]\w*\.py)`")
DOTTED = re.compile(r"(?<![\w./-])testbed(?:\.[A-Za-z_]\w*)+")
COMMAND = re.compile(r"(?<![\w./-])(?<!from )(?<!import )testbed[ \t]+([a-z][a-z|-]*)"
                     r"(?:[ \t]+([a-z][a-z|-]*))?(?![\w./=])")
REPO_DIRS = ("testbed", "benchmarks", "scenarios", "tests", "examples", "scripts", "docs",
             "data", "playbooks")
FILE_SUFFIXES = {".yaml", ".yml", ".json", ".md", ".toml", ".cfg", ".ini", ".txt", ".csv",
                 ".log", ".png", ".html", ".sh"}


def rel(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name


def packages() -> set[str]:
    """The folders directly under testbed/ (a path may start with one: `flowsim/paths.py`)."""
    return {p.name for p in PACKAGE.iterdir()
            if p.is_dir() and not p.name.startswith(("_", "."))}


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def blank_fences(text: str) -> str:
    """The text with every fenced block's lines emptied (line numbers kept)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def code(text: str):
    """(offset, code) for every fenced block (but Python's) and inline code span."""
    for m in FENCE.finditer(text):
        if m.group(2) not in ("python", "py"):
            yield m.start(3), m.group(3)
    for m in SPAN.finditer(blank_fences(text)):
        yield m.start(1), m.group(1)


def is_pattern(name: str) -> bool:
    return any(c in name for c in "*<>{}[]$")


def resolve_path(name: str, pkgs: set[str]) -> Path | None:
    """Where a named path should be, or None when it is not a path into this repository."""
    first = name.split("/", 1)[0]
    if first in REPO_DIRS:
        return ROOT / name
    if first in pkgs:
        return PACKAGE / name
    return None


def exists(where: Path, name: str) -> bool:
    return where.is_dir() if name.endswith("/") else where.exists()


def missing_paths(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    pkgs = packages()
    bad = []
    for m in PATH.finditer(text):
        name = m.group(1)
        if is_pattern(text[m.start(1):m.end(1) + 1]) or name.startswith("testbed/.venv"):
            continue
        where = resolve_path(name, pkgs)
        if where is not None and not exists(where, name):
            bad.append(f"{rel(page)}:{line_of(text, m.start(1))}: {name}")
    # a bare `x.py` on a line that names packages is one of theirs (or a top-level module)
    for number, line in enumerate(text.splitlines(), 1):
        homes = [PACKAGE / n.removeprefix("testbed/").strip("/")
                 for n in re.findall(r"`((?:testbed/)?\w+(?:/\w+)*/)`", line)
                 if resolve_path(n, pkgs) is not None]
        for name in BARE.findall(line):
            if homes and not any((home / name).is_file() for home in [PACKAGE, *homes]):
                bad.append(f"{rel(page)}:{number}: {name} (not in "
                           f"{', '.join(rel(h) + '/' for h in homes)} nor testbed/)")
    return bad


def resolves(dotted: str) -> bool:
    """testbed.a.b names testbed/a/b.py or the package testbed/a/b/; testbed.a.b.attr is
    accepted when testbed/a/b.py exists, and testbed.a.attr when the package's __init__.py
    names attr (a module moved out of a package is not one of its attributes)."""
    parts = dotted.split(".")
    base = ROOT.joinpath(*parts)
    if base.with_suffix(".py").is_file() or base.is_dir():
        return True
    if len(parts) < 2:
        return False
    owner = ROOT.joinpath(*parts[:-1])
    if owner.with_suffix(".py").is_file():
        return True
    init = owner / "__init__.py"
    return init.is_file() and re.search(rf"\b{re.escape(parts[-1])}\b",
                                        init.read_text(encoding="utf-8")) is not None


def missing_modules(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    bad = []
    for m in DOTTED.finditer(text):
        dotted = m.group(0)
        if Path(dotted).suffix in FILE_SUFFIXES:  # testbed.yaml, a file's name
            continue
        if not resolves(dotted):
            bad.append(f"{rel(page)}:{line_of(text, m.start())}: {dotted}")
    return bad


def missing_commands(page: Path) -> list[str]:
    import click

    from testbed.cli import main  # the group testbed/__main__.py runs

    text = page.read_text(encoding="utf-8")
    bad = []
    for offset, snippet in code(text):
        for m in COMMAND.finditer(snippet):
            group: click.Command = main
            words = [w for w in m.groups() if w]
            for word in words:
                if not isinstance(group, click.Group):
                    break  # a command's arguments, not a subcommand
                names = [n for n in word.split("|") if n]
                found = [group.commands.get(n) for n in names]
                if not all(found):
                    unknown = [n for n, c in zip(names, found, strict=True) if c is None]
                    bad.append(f"{rel(page)}:{line_of(text, offset + m.start())}: "
                               f"{m.group(0).strip()} (no command {' '.join(unknown)})")
                    break
                group = found[0]
    return bad


def test_there_are_reference_pages_and_the_log_is_apart():
    assert REFERENCE and all("log" not in p.relative_to(DOCS).parts[:-1] for p in REFERENCE)


@pytest.mark.parametrize("page", REFERENCE, ids=rel)
def test_reference_pages_carry_no_dates(page):
    text = page.read_text(encoding="utf-8")
    bad = [f"{rel(page)}:{number}: {m.group(0)} in {line.strip()[:80]!r}"
           for number, line in enumerate(text.splitlines(), 1) for m in DATE.finditer(line)]
    assert not bad, ("a reference page says what is true now; move dated figures to "
                     "docs/log/ with their dates:\n" + "\n".join(bad))


@pytest.mark.parametrize("page", NAMED, ids=rel)
def test_named_files_and_modules_exist(page):
    bad = missing_paths(page) + missing_modules(page)
    assert not bad, "names that are not in the repository:\n" + "\n".join(bad)


@pytest.mark.parametrize("page", NAMED, ids=rel)
def test_named_testbed_commands_exist(page):
    bad = missing_commands(page)
    assert not bad, "`testbed` commands that do not exist:\n" + "\n".join(bad)


def test_the_checks_catch_what_they_are_for(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Run `testbed validat scenarios/validate.yaml` and `testbed remote dask X`.\n"
                    "```sh\ntestbed net dwn SCENARIO\ncd netkv-testbed\n```\n"
                    "`from testbed import validate`, `testbed.validate(scenario)`, "
                    "`testbed.flowsim.nowhere`.\n"
                    "Dated 2026-12-04; the folder validate-20261205-231545 is no date.\n"
                    "See `ns3sim/build.py`, `flowsim/network.py`, `testbed.flowsim.network.Network`,"
                    " `testbed.nowhere.thing`, `scenarios/nothere.yaml`, `scenarios/*.yaml`.\n"
                    "| `testbed/ns3sim/` | `fabric.py`, `process.py` |\n", encoding="utf-8")
    paths = missing_paths(page)
    assert [p.split(": ", 1)[1] for p in paths] == [
        "ns3sim/build.py", "scenarios/nothere.yaml",
        "fabric.py (not in testbed/ns3sim/ nor testbed/)"]
    assert [m.split(": ", 1)[1] for m in missing_modules(page)] == [
        "testbed.flowsim.nowhere", "testbed.nowhere.thing"]
    assert [c.split(": ", 1)[1] for c in missing_commands(page)] == [
        "testbed net dwn (no command dwn)", "testbed validat (no command validat)"]
    assert [m.group(0) for m in DATE.finditer(page.read_text())] == ["2026-12-04"]
