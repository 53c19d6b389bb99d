"""Which link directions a capture names, and whether the fabric has them: one reading
of 'a>b' (what a sends toward b) and 'a-b' (both ways) for the scenario's check and the
capture itself."""

from __future__ import annotations

from testbed.topologies.fattree import FatTreeSpec


def directions(names: list[str]) -> list[tuple[str, str]]:
    """'a>b' -> [(a, b)]; 'a-b' -> both ways; each direction once, in order (Capture
    keeps those a switch sends)."""
    out: list[tuple[str, str]] = []
    for name in names:
        if ">" in name:
            a, b = name.split(">", 1)
            pairs = [(a, b)]
        else:
            a, b = name.split("-", 1)
            pairs = [(a, b), (b, a)]
        out += [p for p in pairs if p not in out]
    return out


def capture_error(spec: FatTreeSpec, name: str) -> str | None:
    """Why `name` cannot be captured on this fabric, or None."""
    links = {(lk.a, lk.b) for lk in spec.links} | {(lk.b, lk.a) for lk in spec.links}
    if (">" not in name and "-" not in name) or directions([name])[0] not in links:
        return (f"{name!r} is not a link of the fabric: give 'a>b' (what a sends toward b) "
                "or 'a-b' (both ways); testbed topology SCENARIO --links lists them")
    switches = {n for names in spec.switches.values() for n in names}
    if ">" in name and name.split(">")[0] not in switches:
        a, b = name.split(">", 1)
        return (f"{name!r}: packets are captured where a switch sends them; {a} is a host: "
                f"give '{b}>{a}'")
    return None
