"""What a validation keeps between runs on one machine: the fabric's calibration, and how
long each phase of a validation took here (the planner's wall-time figures).

A calibration measures this machine's fabric at one scale and dilation: it is reused
only for the same fabric (cluster, network and emulation sections), the same machine
(host name and cores), the same code (package version) and while it is younger than
its age limit; anything else is refused as stale and measured again. Files live under
$NETKV_CACHE_DIR, else $XDG_CACHE_HOME/netkv-testbed, else ~/.cache/netkv-testbed.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from importlib import metadata
from pathlib import Path

from testbed.cachedir import user_cache
from testbed.records import atomic_write

FORMAT = 7  # 2: competing probes of three sizes, spaced starts, the contention fit;
# 3: SYNs ride the control class (the probes no longer wait out dropped SYNs);
# 4: each competing probe records the spacing it was asked for (asked_spacing_s);
# 5: probes on kept connections (emulation.kv_connections), Nagle off on them;
# 6: the large lone sizes repeated, the capacity on each size's fastest, capped by the wire
# 7: one replica in modelled time (queues and RTO floor at any dilation) and ns-3's twin
DEFAULT_MAX_AGE_S = 24 * 3600.0
# Phase times measured on the 2-core development machine (demo scenario, dilation 2):
# the planner's figures until this machine has measured its own.
# drain_factor: the packets' drain after the window over the flow-model pilot's (1.2-1.7
# on that machine's demo runs); worker_stop_s: the last request done -> the run's last
# record written (6.0-8.5 s there: the fidelity judged and the records out).
DEFAULT_TIMINGS = {"fabric_s": 10.0, "calibration_s": 45.0, "worker_start_s": 3.5,
                   "worker_stop_s": 7.0, "judge_s": 8.0, "drain_factor": 1.5}


def cache_dir() -> Path:
    if os.environ.get("NETKV_CACHE_DIR"):
        return Path(os.environ["NETKV_CACHE_DIR"])
    return user_cache()


def _version() -> str:
    try:
        return metadata.version("netkv-testbed")
    except metadata.PackageNotFoundError:
        return "unknown"


def machine() -> dict:
    return {"host": platform.node(), "cpus": os.cpu_count()}


def calibration_key(scenario, split: dict | None = None) -> str:
    """What a calibration depends on: the fabric as emulated (with `split`, the datapath
    and OVS daemons that carry it: net.plan_split's record), the machine, the code."""
    dump = scenario.model_dump(mode="json")
    what = {"format": FORMAT, "version": _version(), **machine(),
            **{k: dump[k] for k in ("cluster", "network", "emulation")}}
    if split is not None:
        what["split"] = [split["kind"], split["ovs_daemons"]]
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def _calibration_file(scenario, split: dict | None) -> Path:
    return cache_dir() / "calibration" / f"{calibration_key(scenario, split)}.json"


def load_calibration(scenario, max_age_s: float = DEFAULT_MAX_AGE_S,
                     now: float | None = None, split: dict | None = None
                     ) -> tuple[dict | None, str]:
    """(calibration, why): the cached calibration of this fabric if fresh, else None and
    the reason it was not used."""
    path = _calibration_file(scenario, split)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "no calibration of this fabric on this machine yet"
    except (OSError, json.JSONDecodeError) as exc:
        return None, f"cached calibration unreadable ({exc}); measuring again"
    age = (now or time.time()) - float(doc.get("measured_at", 0.0))
    if age > max_age_s:
        return None, (f"cached calibration is {age / 3600:.1f} h old (limit "
                      f"{max_age_s / 3600:.1f} h): stale, measuring again")
    return doc["calibration"], f"reusing the calibration measured {age / 60:.0f} min ago ({path})"


def save_calibration(scenario, calibration: dict, now: float | None = None,
                     split: dict | None = None) -> Path:
    path = _calibration_file(scenario, split)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps({"measured_at": now or time.time(), **machine(),
                                   "calibration": calibration}, indent=1))
    return path


def _timings_file() -> Path:
    return cache_dir() / "timings.json"


def load_timings() -> tuple[dict, str]:
    """(phase -> seconds, source): this machine's measured phase times, else the defaults."""
    try:
        doc = json.loads(_timings_file().read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return dict(DEFAULT_TIMINGS), "the development machine's figures (none measured here yet)"
    if doc.get("machine") != machine():
        return dict(DEFAULT_TIMINGS), "the development machine's figures (cache from another machine)"
    if not set(doc["timings"]) & set(DEFAULT_TIMINGS):  # only a fabric's load (emulate)
        return ({**DEFAULT_TIMINGS, **doc["timings"]},
                "the development machine's figures (no validation here yet)")
    return {**DEFAULT_TIMINGS, **doc["timings"]}, "measured on this machine"


def measured_here() -> dict:
    """The figures this machine's file holds (none of the defaults)."""
    try:
        doc = json.loads(_timings_file().read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return doc["timings"] if doc.get("machine") == machine() else {}


def record_timings(measured: dict[str, float], weight: float = 0.5) -> None:
    """Fold newly measured figures into this machine's (an exponential average); the
    file keeps only what was measured here."""
    old = measured_here()
    new = {k: (weight * v + (1 - weight) * old[k]) if k in old else v
           for k, v in measured.items() if v == v and v >= 0}
    path = _timings_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps({"machine": machine(), "timings": {**old, **new}}, indent=1))


def record_fabric(folder: Path) -> None:
    """After an emulation on this machine's fabric(s) (its folder): what one fabric alone
    kept busy (lanes.fabric_load) and how many side by side stayed faithful
    (lanes.lanes_ceiling, kept as measured, not averaged): what sizes the next."""
    from testbed.emulation.lanes import fabric_load, lanes_ceiling

    load = fabric_load(folder)
    if load:
        record_timings(load)
    known = load_timings()[0].get("lanes_ceiling")
    ceiling = lanes_ceiling(folder, known)
    if ceiling is not None and ceiling != known:
        record_timings({"lanes_ceiling": ceiling}, weight=1.0)
