"""The declared seams hold: every engine's network has each member of the network seam
(testbed/control/network_seam.py) with the Protocol's signature, and every mixin of the flow
simulator uses of its host exactly what its host Protocol declares, which FlowSimulation
provides."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
import types
import typing
from functools import cache
from typing import Protocol

import numpy as np
import pytest

from testbed.control.network_seam import FluidBackground, NetworkFlow, NetworkLink, SimulatedNetwork
from testbed.flowsim.compiled_sharing import NativeFluidNetwork
from testbed.flowsim.faults import FaultEvents, FaultHost
from testbed.flowsim.links import Flow, LinkState
from testbed.flowsim.model_network import ModelNetwork
from testbed.flowsim.network import FluidNetwork
from testbed.flowsim.reuse_fetch import FetchHost, PrefixFetch
from testbed.flowsim.simulator import FlowSimulation
from testbed.flowsim.telemetry import NetworkTelemetry, TelemetryHost
from testbed.flowsim.transfers import TransferHost, TransferPlane
from testbed.ns3sim.packet_network import PacketLink, PacketNetwork
from testbed.ns3sim.simulation import Ns3Simulation
from testbed.scenario import load_scenario
from testbed.workloads.build import Workload
from testbed.workloads.requests import Request
from tests.conftest import ROOT

# the seam's own names for what each engine calls by its class's
FLUID = {"NetworkFlow": "Flow", "NetworkLink": "LinkState"}
PACKETS = {"NetworkFlow": "Flow", "NetworkLink": "PacketLink"}
NETWORKS = [(FluidNetwork, FLUID), (NativeFluidNetwork, FLUID), (ModelNetwork, FLUID),
            (PacketNetwork, PACKETS)]
MIXINS = [(TransferPlane, TransferHost), (FaultEvents, FaultHost), (PrefixFetch, FetchHost),
          (NetworkTelemetry, TelemetryHost)]


# -- what a Protocol declares, what a class provides --------------------------------------
def members(proto: type) -> dict[str, object]:
    """A Protocol's members, its bases' included: name -> the attribute's annotation (a
    string), or the method or property."""
    out: dict[str, object] = {}
    for klass in reversed(proto.__mro__):
        if klass in (object, Protocol, typing.Generic):
            continue
        out.update(vars(klass).get("__annotations__", {}))
        out.update({name: value for name, value in vars(klass).items()
                    if isinstance(value, types.FunctionType | property)
                    and not (name.startswith("__") and name.endswith("__"))})
    return out


@cache
def self_stores(func: types.FunctionType) -> dict[str, str | None]:
    """Attributes a method assigns on self: name -> its annotation where it has one."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except OSError:  # made, not written (a dataclass's __init__: its fields are annotated)
        return {}
    out: dict[str, str | None] = {}
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else [])
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                    and target.value.id == "self":
                ann = ast.unparse(node.annotation) if isinstance(node, ast.AnnAssign) else None
                out[target.attr] = ann or out.get(target.attr)
    return out


def provided(klass: type) -> dict[str, str | None]:
    """What a class's instances have: class attributes, methods and properties, and what
    its methods assign on self (any class of its MRO); name -> the annotation where one
    is written (the most derived class's)."""
    out: dict[str, str | None] = {}
    for k in reversed(klass.__mro__):
        if k is object:
            continue
        found: dict[str, str | None] = dict.fromkeys(vars(k))
        for value in vars(k).values():
            func = value.fget if isinstance(value, property) else value
            if isinstance(func, types.FunctionType):
                found.update({n: a or found.get(n) for n, a in self_stores(func).items()})
        found.update({n: a for n, a in vars(k).get("__annotations__", {}).items()
                      if isinstance(a, str)})
        out.update({n: a or out.get(n) for n, a in found.items()})
    return out


def norm(annotation: object, aliases: dict[str, str]) -> str | None:
    """An annotation as comparable text: no spaces, the seam's names as the engine's."""
    if annotation is inspect.Parameter.empty:
        return None
    text = re.sub(r"\s+", "", str(annotation))
    for theirs, ours in aliases.items():
        text = re.sub(rf"\b{theirs}\b", ours, text)
    return text


def shape(func, aliases: dict[str, str]) -> tuple:
    sig = inspect.signature(func)
    return (tuple((p.name, p.kind.name, p.default, norm(p.annotation, aliases))
                  for p in sig.parameters.values()),
            norm(sig.return_annotation, aliases))


def drift(klass: type, proto: type, aliases: dict[str, str],
          attribute_types: bool = True) -> list[str]:
    """How `klass` departs from `proto`: members missing, signatures or (with
    attribute_types) attribute annotations that differ."""
    have = provided(klass)
    out = []
    for name, declared in members(proto).items():
        if name not in have:
            out.append(f"{name}: missing")
            continue
        impl = inspect.getattr_static(klass, name, None)
        if isinstance(declared, property):
            if not isinstance(impl, property):
                out.append(f"{name}: not a property")
            elif shape(impl.fget, aliases) != shape(declared.fget, aliases):
                out.append(f"{name}: {shape(impl.fget, aliases)} != "
                           f"{shape(declared.fget, aliases)}")
        elif isinstance(declared, types.FunctionType):
            if not isinstance(impl, types.FunctionType):
                out.append(f"{name}: not a method")
            elif shape(impl, aliases) != shape(declared, aliases):
                out.append(f"{name}: {inspect.signature(impl)} != "
                           f"{inspect.signature(declared)}")
        elif attribute_types and norm(have[name] or "", aliases) != norm(declared, aliases):
            out.append(f"{name}: annotated {have[name]!r}, declared {declared!r}")
    return out


# -- the network seam ---------------------------------------------------------------------
@pytest.mark.parametrize(("network", "aliases"), NETWORKS, ids=lambda v: getattr(v, "__name__", ""))
def test_every_engine_network_keeps_the_seam(network, aliases):
    assert drift(network, SimulatedNetwork, aliases) == []


@pytest.mark.parametrize("network", [FluidNetwork, NativeFluidNetwork, ModelNetwork])
def test_the_fluid_networks_take_background_fractions(network):
    assert drift(network, FluidBackground, FLUID) == []


@pytest.mark.parametrize(("item", "proto"), [(Flow, NetworkFlow), (LinkState, NetworkLink),
                                             (PacketLink, NetworkLink)])
def test_flows_and_links_show_what_the_seam_reads(item, proto):
    assert drift(item, proto, {}) == []


def test_a_drifted_network_is_caught():
    class Renamed(PacketNetwork):
        def set_link(self, a: str, b: str, up: bool, when: float) -> int:
            return 0

    class Reannotated(FluidNetwork):
        def link_bytes(self):
            return super().link_bytes()

    dropped = type("Dropped", (), {k: v for k, v in vars(PacketNetwork).items()
                                   if k != "tier_congestion"})

    class Untyped:
        def __init__(self):
            self.flows = {}

    assert [d.split(":")[0] for d in drift(Renamed, SimulatedNetwork, PACKETS)] == ["set_link"]
    assert [d.split(":")[0] for d in drift(Reannotated, SimulatedNetwork, FLUID)] \
        == ["link_bytes"]
    assert drift(dropped, SimulatedNetwork, PACKETS) == ["tier_congestion: missing"]
    assert "flows: annotated None, declared 'dict[int, NetworkFlow]'" in \
        drift(Untyped, SimulatedNetwork, FLUID)


def net_calls(source: str, klass: str) -> dict[str, set[str]]:
    """`self.net.X` in each method of class `klass` of `source`: method -> {X}."""
    node = next(n for n in ast.parse(source).body
                if isinstance(n, ast.ClassDef) and n.name == klass)
    out: dict[str, set[str]] = {}
    for fn in node.body:
        if isinstance(fn, ast.FunctionDef):
            out[fn.name] = {a.attr for a in ast.walk(fn) if isinstance(a, ast.Attribute)
                            and isinstance(a.value, ast.Attribute) and a.value.attr == "net"
                            and isinstance(a.value.value, ast.Name) and a.value.value.id == "self"}
    return out


@pytest.mark.parametrize("klass", [FlowSimulation, *(m for m, _ in MIXINS)],
                         ids=lambda k: k.__name__)
def test_the_flow_simulator_calls_only_what_the_seam_declares(klass):
    """What both engines run uses SimulatedNetwork only; what ns-3's run replaces (its
    Ns3Simulation overrides) may use the fluid network's FluidBackground too."""
    both, fluid = set(members(SimulatedNetwork)), set(members(FluidBackground))
    calls = net_calls(textwrap.dedent(inspect.getsource(inspect.getmodule(klass))),
                      klass.__name__)
    wrong = {f"{method}: {sorted(used - (fluid if method in vars(Ns3Simulation) else both))}"
             for method, used in calls.items()
             if used - (fluid if method in vars(Ns3Simulation) else both)}
    assert not wrong and any(calls.values())


# -- the mixins' hosts --------------------------------------------------------------------
def needs(source: str, klass: str) -> set[str]:
    """Every `self.X` class `klass` of `source` uses (reads or assigns) that its own body
    does not define: what it needs of the class it is mixed into."""
    node = next(n for n in ast.parse(source).body
                if isinstance(n, ast.ClassDef) and n.name == klass)
    own = {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    own |= {t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets
            if isinstance(t, ast.Name)}
    own |= {n.target.id for n in node.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    used = {a.attr for a in ast.walk(node) if isinstance(a, ast.Attribute)
            and isinstance(a.value, ast.Name) and a.value.id == "self"}
    return used - own


def test_every_mixin_of_the_flow_simulator_declares_its_host():
    assert set(FlowSimulation.__bases__) == {mixin for mixin, _ in MIXINS}


@pytest.mark.parametrize(("mixin", "host"), MIXINS, ids=lambda v: v.__name__)
def test_a_mixin_uses_of_its_host_what_its_protocol_declares(mixin, host):
    used = needs(inspect.getsource(inspect.getmodule(mixin)), mixin.__name__)
    declared = set(members(host))
    assert used - declared == set(), f"undeclared: add them to {host.__name__}"
    assert declared - used == set(), f"declared, never used: drop them from {host.__name__}"


def test_an_undeclared_use_is_caught():
    source = inspect.getsource(inspect.getmodule(FaultEvents)).replace(
        "self.failed.add(name)", "self.failed.add(name)\n        self.spare.add(name)")
    assert needs(source, "FaultEvents") - set(members(FaultHost)) == {"spare"}


@pytest.mark.parametrize("simulation", [FlowSimulation, Ns3Simulation],
                         ids=lambda k: k.__name__)
@pytest.mark.parametrize("host", [h for _, h in MIXINS], ids=lambda h: h.__name__)
def test_the_simulations_provide_every_host_member(simulation, host):
    """Statically: assigned on self somewhere, or a method or property with the
    Protocol's signature."""
    assert drift(simulation, host, {}, attribute_types=False) == []


def conforms(value, hint) -> bool:
    """Whether `value` is of type `hint` (the forms the host Protocols use)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return any(conforms(value, a) for a in args)
    if origin is dict:
        return isinstance(value, dict) and all(
            conforms(k, args[0]) and conforms(v, args[1]) for k, v in value.items())
    if origin in (list, set):
        return isinstance(value, origin) and all(conforms(v, args[0]) for v in value)
    if origin is tuple:
        return isinstance(value, tuple) and len(value) == len(args) and all(
            conforms(v, a) for v, a in zip(value, args, strict=True))
    if getattr(hint, "_is_protocol", False):
        return all(hasattr(value, name) for name in members(hint))
    if hint is float:
        return isinstance(value, int | float)
    return isinstance(value, hint)


def test_a_flow_simulation_has_every_host_member_of_its_declared_type():
    scenario = load_scenario(ROOT / "scenarios" / "default.yaml")
    request = Request("r0", 0.0, 8192, 3, tuple(range(1000, 1016)))
    workload = Workload([request], [], 1.0, 1.0, warmup_s=0.0, measure_s=10.0, slo_s=5.0)
    sim = FlowSimulation(scenario, "netkv-full", 1, workload)
    try:
        sim.run()  # some members are set as the run starts
        for _, host in MIXINS:
            hints = typing.get_type_hints(host)
            for name in members(host):
                assert hasattr(sim, name), f"{host.__name__}.{name}"
                if name in hints:
                    assert conforms(getattr(sim, name), hints[name]), \
                        f"{host.__name__}.{name}: {type(getattr(sim, name)).__name__}"
        assert isinstance(sim._last_sample[0], np.ndarray)
    finally:
        sim.release()


# -- the packages' tables -----------------------------------------------------------------
@pytest.mark.parametrize("package", ["flowsim", "control"])
def test_a_package_docstring_tables_exactly_its_modules(package):
    """Its docstring's table (a line per module: names, then what it is) names every
    module of the package, and nothing else."""
    folder = ROOT / "testbed" / package
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8")))
    rows = [re.split(r"\s{2,}", line, maxsplit=1)[0] for line in doc.split("\n\n", 1)[1]
            .splitlines() if line.strip()]
    named = {name.strip() for row in rows for name in row.split(",")}
    assert named == {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
