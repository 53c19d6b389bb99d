"""The layer order (README, "How it is built"): no module imports from a layer above its own,
and no two modules import each other, directly or round a loop (lazy imports included)."""

from __future__ import annotations

import ast
import re
from collections import defaultdict

from tests.conftest import ROOT

# lowest first; a unit is a package under testbed/ or a top-level module
LAYERS = [
    "yamlfile", "inputs", "progress", "clock", "cachedir", "native", "model", "workloads", "topologies",
    "datapath", "lifecycle", "records", "metrics", "plausibility", "scenario", "estimate", "serving",
    "control", "flowsim", "ns3sim", "sdn", "workers", "remote", "vm", "sweep", "cells",
    "runner", "emulation", "validate", "results", "api", "cli", "__main__", "testbed",
]
PACKAGE = ROOT / "testbed"


def module_name(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "testbed"


def imports() -> dict[str, set[str]]:
    """module -> the testbed modules it imports (anywhere in its body)."""
    known = {module_name(p) for p in PACKAGE.rglob("*.py")}
    out: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        me = module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and \
                    node.module.split(".")[0] == "testbed":
                for alias in node.names:  # `from testbed.x import y` may name a module y
                    sub = f"{node.module}.{alias.name}"
                    out[me].add(sub if sub in known else node.module)
            elif isinstance(node, ast.Import):
                out[me].update(a.name for a in node.names if a.name.split(".")[0] == "testbed")
    return out


def test_every_unit_has_a_layer():
    units = {unit(module_name(p)) for p in PACKAGE.rglob("*.py")}
    assert units <= set(LAYERS), f"add {sorted(units - set(LAYERS))} to LAYERS and the README"


def test_no_module_imports_from_a_layer_above_its_own():
    rank = {name: k for k, name in enumerate(LAYERS)}
    upward = sorted(f"{me} imports {dep}" for me, deps in imports().items() for dep in deps
                    if unit(dep) != unit(me) and rank[unit(dep)] > rank[unit(me)])
    assert not upward, "\n".join(upward)


def test_no_import_cycles_between_modules():
    graph = imports()
    cycles = []
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if dep == node or dep == "testbed" or node == "testbed":
                continue  # a package's __init__ re-exporting is not a loop
            if state.get(dep) == 1:
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "\n".join(cycles)


def test_the_readme_states_the_same_order():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    line = next((ln for ln in text.splitlines() if ln.startswith("Layers, lowest first:")), "")
    named = [w.strip("`,.") for w in line.split(":", 1)[-1].split() if w.strip("`,.")]
    assert named == [u for u in LAYERS if u not in ("__main__", "testbed")], line


def test_every_module_imports():
    """A moved module leaves no stale import behind (lazy ones are compiled, not run)."""
    import importlib

    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        if name.endswith("__main__"):
            continue
        importlib.import_module(name)


def test_no_module_name_means_two_different_things():
    by: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py"):
            by[path.name].add(path.parent.name)
    twins = {name: sorted(homes) for name, homes in by.items() if len(homes) > 1}
    assert not twins, f"one name, two packages: rename one of them: {twins}"


def test_no_function_over_80_lines_where_runs_are_judged():
    long = []
    for folder in ("validate", "emulation"):
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and \
                        node.end_lineno - node.lineno + 1 > 80:
                    long.append(f"{path.relative_to(PACKAGE)}: {node.name} "
                                f"({node.end_lineno - node.lineno + 1} lines)")
    assert not long, "split these: " + "; ".join(long)


# A package split into rooms keeps them in order too: a room imports only from rooms below.
ROOMS = {
    "validate": ["judging", "engines", "comparison", "report", "pipelines"],
    "workers": ["router"],
    "model": ["extensions"],
    "emulation": ["ovs"],
}


def test_rooms_import_only_from_rooms_below():
    upward = []
    for package, rooms in ROOMS.items():
        rank = {room: k for k, room in enumerate(rooms)}

        def room(module: str, package=package) -> str | None:
            parts = module.split(".")
            return parts[2] if len(parts) > 2 and parts[1] == package else None

        for me, deps in imports().items():
            mine = room(me)
            if mine not in rank:
                continue
            upward += [f"{me} imports {dep}" for dep in sorted(deps)
                       if room(dep) in rank and rank[room(dep)] > rank[mine]]
    assert not upward, "\n".join(upward)


def test_every_room_is_in_its_package_order():
    for package, rooms in ROOMS.items():
        found = {p.name for p in (PACKAGE / package).iterdir() if (p / "__init__.py").exists()}
        assert found == set(rooms), f"{package}: rooms {sorted(found)}, ROOMS says {rooms}"


def test_no_package_holds_more_than_20_modules_flat():
    """A newcomer looks for a room by concern; past 20 modules a package wants rooms."""
    crowded = {str(d.relative_to(ROOT)): n for d in [PACKAGE, *PACKAGE.rglob("*")]
               if d.is_dir() and d.name != "__pycache__"
               and (n := sum(1 for f in d.glob("*.py") if f.name != "__init__.py")) > 20}
    assert not crowded, f"split into rooms by concern: {crowded}"


IMPURE = ("os", "time", "signal", "threading", "subprocess", "socket", "pathlib", "multiprocessing")


def test_the_model_core_is_pure():
    """testbed/model/*.py promise no I/O, no clock, no threads: only model/extensions/ may."""
    found = []
    for path in sorted((PACKAGE / "model").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"model/{path.name} imports {n}" for n in names
                      if n.split(".")[0] in IMPURE or n.startswith("testbed.model.extensions")]
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "open":
                found.append(f"model/{path.name} calls open()")
    assert not found, "; ".join(found)


def test_every_package_with_a_module_table_names_each_of_its_modules():
    """A package docstring that tables its modules (a line starting `name  what`) names
    every module it holds, and no module it does not."""
    stale = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        rows = re.findall(r"^([a-z_0-9]+(?:, [a-z_0-9]+)*)/? {2,}\S", doc, re.M)
        if not rows:
            continue
        named = {n for row in rows for n in row.split(", ")}
        here = {p.stem for p in init.parent.glob("*.py")} - {"__init__", "__main__"}
        rooms = {p.parent.name for p in init.parent.glob("*/__init__.py")}
        rel = init.parent.relative_to(ROOT)
        stale += [f"{rel}: {m} not in its table" for m in sorted(here - named)]
        stale += [f"{rel}: the table names {m}, which is not there"
                  for m in sorted(named - here - rooms)]
    assert not stale, "; ".join(stale)
