"""The flow engine's records on every shipped scenario are what they were (see
tests/records_digest.py for when and how to rewrite them)."""

from __future__ import annotations

import json

import pytest

from tests.records_digest import ROOT, STORED, digest


@pytest.mark.parametrize("name", sorted(json.loads(STORED.read_text())))
def test_records_of_a_shipped_scenario_are_unchanged(name):
    assert digest(ROOT / "scenarios" / name) == json.loads(STORED.read_text())[name], (
        f"{name}: the flow engine's records changed; if that was meant, rewrite them with "
        "`python -m tests.records_digest --write` and say why in the commit")


def test_every_shipped_scenario_has_its_digest():
    assert sorted(p.name for p in (ROOT / "scenarios").glob("*.yaml")) == sorted(
        json.loads(STORED.read_text()))
