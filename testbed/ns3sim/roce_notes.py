"""What a user must hear of a RoCE run beyond its table: lossless fabrics fail by
standing still, and a run's records say where (ns3.json's `roce`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path


def roce_notes(facts: Iterable[dict]) -> list[str]:
    """Lines on the runs' pauses: routes that held a cycle of buffer dependencies (where
    PFC can deadlock), pauses the watchdog broke (KV dropped to break them), pauses still
    standing when a run ended. Empty where there is nothing to say (or no RoCE)."""
    roce = [f["roce"] for f in facts if isinstance(f.get("roce"), dict)]
    if not roce:
        return []
    out = []
    cycles = [r["dependency_cycle"] for r in roce if r.get("dependency_cycle")]
    if cycles:
        first = cycles[0]
        ring = " > ".join([hop.split(">")[0] for hop in first] + [first[0].split(">")[0]])
        out.append(f"{len(cycles)} of {len(roce)} RoCE runs' routes held a cycle of buffer "
                   f"dependencies ({ring}): PFC can deadlock there (a link fault's detours)")
    trips = [t for r in roce for t in r.get("watchdog_trips") or []]
    if trips:
        where = sorted({t["egress"] for t in trips})
        out.append(f"the PFC watchdog broke {len(trips)} pause(s) that never released "
                   f"({', '.join(where[:4])}{', ...' if len(where) > 4 else ''}), dropping "
                   f"{sum(r.get('kv_drops', 0) for r in roce)} KV packets to do it")
    standing = sum(bool(r.get("paused_at_end")) for r in roce)
    if standing:
        out.append(f"{standing} RoCE run(s) ended with pauses standing (a cycle the "
                   "watchdog had not yet broken: ns3.json roce.paused_at_end)")
    return out


def folder_notes(folder: Path) -> list[str]:
    """roce_notes over every run's ns3.json in a simulate folder."""
    facts = []
    for path in sorted(folder.glob("cells/*/*/seed*/ns3.json")):
        try:
            facts.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # a run's records are judged elsewhere
    return roce_notes(facts)
