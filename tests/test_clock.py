"""Wall <-> modelled time converted in one place (testbed/clock.py)."""

from __future__ import annotations

import ast

from testbed.clock import Dilation, RunClock
from tests.conftest import ROOT


def test_spans_rates_and_instants_convert_both_ways():
    d = Dilation(4.0)
    assert d.wall(2.5) == 10.0 and d.modelled(10.0) == 2.5
    assert d.wall_rate(8e6) == 2e6  # a modelled 8 MB/s is 2 MB/s on the slowed fabric
    assert d.slower(2) == Dilation(8.0)
    clock = RunClock(t0=1000.0, dilation=4.0)
    assert clock.wall(2.5) == 1010.0 and clock.to_modelled(1010.0) == 2.5
    assert clock.span(10.0) == 2.5 and clock.spans == d


def _dilation(node: ast.AST) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return "dilation" in name


def test_no_dilation_arithmetic_outside_the_clock_module():
    """A wall or modelled quantity multiplied or divided by the dilation by hand is how
    the conversions drifted apart; the clock names each one."""
    found = []
    for path in sorted((ROOT / "testbed").rglob("*.py")):
        if path.name == "clock.py" and path.parent.name == "testbed":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Div) and (
                    _dilation(node.left) or _dilation(node.right)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, "convert through testbed.clock: " + ", ".join(found)
