"""The docs cannot rot: every page is reachable from the README, every link stays in the
repository and lands on a file and heading that exist, and every code block is run or
checked (Python executed, scenarios validated, `testbed` command lines parsed against the
CLI, scripts and paths present)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import click
import pytest
import yaml

from testbed.cli import main
from testbed.scenario import Scenario
from tests.conftest import ROOT

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS, *sorted((ROOT / "examples").glob("*/README.md"))]
LOGS = sorted((ROOT / "docs" / "log").glob("*.md"))  # dated: links checked, code kept as run
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^([ \t]*)```(\w*)\n(.*?)^\1```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def blocks(path: Path) -> list[tuple[str, str, int]]:
    text = path.read_text(encoding="utf-8")
    return [(m.group(2), textwrap.dedent(m.group(3)), text[:m.start()].count("\n") + 1)
            for m in FENCE.finditer(text)]


def all_blocks(lang: str | None = None):
    return [pytest.param(page, code, id=f"{page.relative_to(ROOT)}:{line}")
            for page in PAGES for kind, code, line in blocks(page)
            if lang is None or kind == lang]


def test_the_readme_is_short_and_starts_with_the_two_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README has {len(lines)} lines; move detail to docs/"
    first = next(code for _, code, _ in blocks(README))
    assert first.splitlines()[0].startswith("./run.sh demo")
    assert first.splitlines()[1].startswith("./run.sh test")


def test_every_docs_page_is_linked_from_the_readme_and_the_index():
    readme = README.read_text(encoding="utf-8")
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    for page in DOCS:
        assert f"](docs/{page.name})" in readme or f"](docs/{page.name}#" in readme, page.name
        if page.name != "index.md":
            assert f"]({page.name})" in index, page.name


@pytest.mark.parametrize("page", PAGES + LOGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_stay_in_the_repository_and_land(page):
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for target in LINK.findall(text):
        assert not re.match(r"^[a-z][a-z0-9+.-]*:", target), \
            f"{page.name}: {target} leaves the repository"
        where, _, anchor = target.partition("#")
        dest = (page.parent / where).resolve() if where else page
        assert dest.exists(), f"{page.name}: {target} does not exist"
        assert dest.is_relative_to(ROOT), f"{page.name}: {target} is outside the repository"
        if anchor:
            assert dest.suffix == ".md" and anchor in anchors(dest), \
                f"{page.name}: no heading #{anchor} in {dest.name}"


@pytest.mark.parametrize("page, code", all_blocks("python"))
def test_python_blocks_run(page, code, tmp_path, with_plugins):
    for name in ("scenarios", "data", "examples"):  # the paths the docs use, from a clean folder
        (tmp_path / name).symlink_to(ROOT / name)
    script = tmp_path / "block.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{with_plugins}"}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    if "(Scheduler)" in code:  # a scheduler in the docs must also run as a plugin
        cls = re.search(r"^class (\w+)\(Scheduler\)", code, re.M).group(1)
        check = (f"from testbed import load_scenario, simulate\n"
                 f"run = simulate(load_scenario('scenarios/default.yaml', "
                 f"{{'workload.measure_s': 4}}, seeds=1, schedulers=['block:{cls}']), 'out')\n"
                 f"assert run.fault_count() == 0 and len(run.requests) > 0\n")
        done = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]


def _scenario_like(doc) -> bool:
    return isinstance(doc, dict) and doc and set(doc) <= set(Scenario.model_fields)


@pytest.mark.parametrize("page, code", all_blocks("yaml") + all_blocks("toml"))
def test_yaml_and_toml_blocks_parse_and_scenarios_validate(page, code, with_plugins):
    if code.lstrip().startswith("[") and "=" in code:
        tomllib.loads(code)
        return
    doc = yaml.safe_load(code)
    if _scenario_like(doc):
        from testbed import api

        api.load_scenario({"name": "docs", **doc})  # raises, naming the field


def _command_lines(code: str):
    for raw in code.splitlines():
        line = raw.split(" #")[0].strip().removeprefix("$ ").removeprefix("sudo ")
        if " -- " in line:
            line = line.split(" -- ")[0]  # a remote command after `--` is not ours to parse
        yield line


@pytest.mark.parametrize("page, code", all_blocks())
def test_testbed_command_lines_name_real_commands_and_options(page, code):
    for line in _command_lines(code):
        if re.match(r"^(\S*/)?python3? (\S+\.py)", line):
            script = re.match(r"^(\S*/)?python3? (\S+\.py)", line).group(2)
            assert (ROOT / script).is_file(), f"{page.name}: {script} does not exist"
            continue
        m = re.match(r"^(?:\.venv/bin/|/opt/\S+/)?testbed (.*)$", line)
        if not m:
            continue
        plain = re.sub(r"\$\([^)]*\)", "VALUE", m.group(1))  # a shell substitution
        words = shlex.split(plain.replace("[", " ").replace("]", " "), posix=True)
        _check(main, words, f"{page.name}: testbed {m.group(1)}")


def _check(group: click.Group, words: list[str], where: str) -> None:
    cmd: click.Command = group
    rest = list(words)
    while isinstance(cmd, click.Group) and rest and not rest[0].startswith("-"):
        names = rest.pop(0).split("|")  # `remote run|start|stop` lists alternatives
        subs = [cmd.get_command(click.Context(cmd), n) for n in names]
        assert all(subs), f"{where}: no command {names}"
        cmd = subs[0]
        if len(subs) > 1:  # options of the first alternative are checked
            break
    known = {opt for p in cmd.params for opt in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
    for word in rest:
        if word.startswith("-") and word not in ("-", "--") and not word[1:2].isdigit():
            option = word.split("=")[0]
            for alt in option.split("|"):
                assert alt in known, f"{where}: {cmd.name} has no option {alt}"
