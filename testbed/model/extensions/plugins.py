"""Where a scheduler key comes from: a built-in, an entry point, or `module:Class`.

A scenario's `schedulers` list names each scheduler by a key. The built-ins are the
paper's (model/schedulers.py). Anything else is a plugin, found in this order:

- an installed package's entry point in the group `netkv_testbed.schedulers`
  (`p2c = "p2c_plugin:PowerOfTwo"` in its pyproject.toml makes the key `p2c`);
- a `module:Class` string importable from the Python path ("p2c_plugin:PowerOfTwo").

A plugin is a subclass of `Scheduler` built as `Class(ctx)`; both engines build it the
same way, so it runs unchanged in the flow simulator and in the packet router. Plugins
run behind a guard (model/extensions/guard.py): their failures are reported, never fatal.
"""

from __future__ import annotations

import functools
import importlib
import re
from dataclasses import dataclass
from importlib import metadata

from testbed.model.schedulers import SCHEDULERS, Scheduler, SchedulerContext

ENTRY_POINT_GROUP = "netkv_testbed.schedulers"
_TARGET = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
                     r":[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class PluginError(ValueError):
    """A scheduler key that names no usable scheduler; the message says why."""


@dataclass(frozen=True)
class PluginScheduler:
    """A plugin scheduler, resolved: its key, display name, class and where it came from."""

    key: str
    name: str
    cls: type[Scheduler]
    origin: str  # "entry point p2c = p2c_plugin:PowerOfTwo" or "p2c_plugin:PowerOfTwo"

    def build(self, ctx: SchedulerContext) -> Scheduler:
        return self.cls(ctx)


def is_builtin(key: str) -> bool:
    return key in SCHEDULERS


def entry_points() -> dict[str, str]:
    """Installed plugins: entry-point name -> "module:Class"."""
    return {ep.name: ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


@functools.lru_cache(maxsize=256)
def resolve(key: str) -> PluginScheduler:
    """The plugin `key` names (an entry point's name or "module:Class"), imported and
    checked; PluginError says what is wrong in terms of the scenario's key. Remembered
    once found: a sweep validates the key in every cell, and reading the installed
    packages' entry points costs milliseconds (a failure is not remembered)."""
    installed = entry_points()
    found = target_of(key, installed)
    if found is None:
        known = ", ".join([*SCHEDULERS, *installed])
        raise PluginError(f"unknown scheduler {key!r}; choose from {known}, or name a plugin "
                          "as 'module:Class' (docs/schedulers.md)")
    target, origin = found
    cls = _load(target, origin)
    name = cls.__dict__.get("name") or key
    return PluginScheduler(key, str(name), cls, origin)


def target_of(key: str, installed: dict[str, str]) -> tuple[str, str] | None:
    """The "module:Class" a plugin key names and where it came from (an installed entry
    point's name first, then a "module:Class" key itself); None: it names neither."""
    if key in installed:
        return installed[key], f"entry point {key} = {installed[key]}"
    if ":" in key:
        return key, key
    return None


def _load(target: str, origin: str) -> type[Scheduler]:
    obj = load_class(target, f"scheduler {origin!r}", Scheduler,
                     "a scheduler class (subclass testbed.Scheduler and implement rank(); "
                     "docs/schedulers.md)")
    if obj.rank is Scheduler.rank and obj.select is Scheduler.select:
        raise PluginError(f"scheduler {origin!r}: {target.partition(':')[2]} implements "
                          "neither rank() nor select()")
    return obj


def load_class(target: str, label: str, base: type, what: str) -> type:
    """The class `target` ("module:Class") names, imported and checked to subclass `base`
    (any plugin kind: schedulers here, network models in model/extensions/network_models.py);
    PluginError starts with `label` ("scheduler 'x:Y'") and, for a wrong class, says it
    is not `what`."""
    if not _TARGET.match(target):
        raise PluginError(f"{label}: expected 'module:Class' (dotted names)")
    module_name, _, attr = target.partition(":")
    try:
        obj = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise PluginError(f"{label}: no module named {module_name!r} on the "
                              "Python path (install the plugin's package, or add its folder "
                              "to PYTHONPATH)") from None
        raise PluginError(f"{label}: importing {module_name} failed: {exc}") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a plugin's import, by name
        raise PluginError(f"{label}: importing {module_name} raised "
                          f"{type(exc).__name__}: {exc}"
                          + (" (a plugin module must not exit the process on import)"
                             if isinstance(exc, SystemExit) else "")) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"{label}: module {module_name} has no {attr!r}")
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, base)):
        raise PluginError(f"{label}: {attr} is not {what}")
    return obj


def display_name(key: str) -> str:
    """A scheduler's name in tables: the paper's for built-ins, the plugin class's `name`
    (or the key) for plugins. Never raises: a record names what ran even if the plugin
    is no longer installed."""
    if key in SCHEDULERS:
        return SCHEDULERS[key]
    try:
        return resolve(key).name
    except PluginError:
        return key


def available() -> dict[str, str]:
    """Every key a scenario may use now: key -> where it comes from."""
    out = {key: f"built-in ({name})" for key, name in SCHEDULERS.items()}
    for name, target in entry_points().items():
        out.setdefault(name, f"entry point -> {target}")
    return out

