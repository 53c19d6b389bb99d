"""The scenario's field reference, generated from the pydantic models' own descriptions
and bounds (as Faucet generates its configuration docs), so the docs cannot drift from
what a scenario file accepts.

    python -m testbed.scenario.reference > docs/scenario-reference.md

tests/test_scenario_reference.py checks the page is current."""

from __future__ import annotations

import types
import typing
from typing import Any, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("min_length", "len >="),
          ("max_length", "len <="), ("pattern", "matches"))


def _models_in(annotation) -> list[type[BaseModel]]:
    """The section models an annotation holds (a field, a list of them, an alternative)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _type_name(annotation) -> str:
    origin = get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(f"`{a}`" for a in get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(annotation))
    if origin is typing.Annotated:
        return _type_name(get_args(annotation)[0])
    if origin is not None:
        args = ", ".join(_type_name(a) for a in get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if annotation is type(None):
        return "none"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"section `{annotation.__name__}`"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(info) -> str:
    parts = []
    for meta in info.metadata:
        for attr, word in BOUNDS:
            value = getattr(meta, attr, None)
            if value is not None:
                parts.append(f"{word} {value}")
    return ", ".join(parts)


def _default(info) -> str:
    if info.is_required():
        return "required"
    value: Any = info.default
    if info.default_factory is not None:
        value = info.default_factory()
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return "(section)"
    text = repr(value) if not isinstance(value, str) else f'"{value}"'
    return f"`{text}`" if len(text) <= 40 else "(long)"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def section(model: type[BaseModel], prefix: str, seen: set) -> list[str]:
    """One table for `model` at `prefix`, then a table per section inside it."""
    rows, inner = [], []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        subs = _models_in(info.annotation)
        desc = info.description or ("the section below" if subs else "")
        bounds = _bounds(info)
        rows.append(f"| `{path}` | {_cell(_type_name(info.annotation))} | "
                    f"{_cell(_default(info))} | {_cell(desc)}"
                    f"{'; ' if desc and bounds else ''}{_cell(bounds)} |")
        for sub in subs:
            if (sub, path) not in seen:
                seen.add((sub, path))
                inner.append((sub, f"{path}."))
    title = prefix.rstrip(".") or "top level"
    doc = (model.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
    lines = [f"## `{title}`", "", *([doc, ""] if doc and model.__module__.startswith(
        "testbed") else []), "| field | type | default | meaning; bounds |",
        "| --- | --- | --- | --- |", *rows, ""]
    for sub, sub_prefix in inner:
        lines += section(sub, sub_prefix, seen)
    return lines


def undescribed(model: type[BaseModel] | None = None, prefix: str = "") -> list[str]:
    """Fields with neither a description nor a section of their own to explain them."""
    if model is None:
        from testbed.scenario import Scenario as model
    out = []
    for name, info in model.model_fields.items():
        subs = _models_in(info.annotation)
        if not info.description and not subs:
            out.append(f"{prefix}{name}")
        for sub in subs:
            out += undescribed(sub, f"{prefix}{name}.")
    return out


def reference() -> str:
    from testbed.scenario import Scenario

    head = ["# Scenario fields", "",
            "[README](../README.md) · [all docs](index.md)", "",
            "Every field a scenario file accepts, with its default, its meaning and its "
            "bounds, generated from the pydantic models (`python -m "
            "testbed.scenario.reference > docs/scenario-reference.md`; a test keeps it "
            "current). A sweep (`sweep:`) names any of these by its dotted path. Unknown "
            "fields, NaN, infinity and out-of-bounds values are refused with the field's "
            "name.", ""]
    return "\n".join(head + section(Scenario, "", set())).rstrip() + "\n"


if __name__ == "__main__":
    print(reference(), end="")
