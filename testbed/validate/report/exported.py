"""The exact work a run served, for another simulator to predict: `testbed export-workload`.

A run folder's requests (arrival, token counts, KV sizes, the instances chosen) and KV
transfers (endpoints, tier, bytes, start) per cell, with the fabric they ran on (every
instance's place, every tier's bandwidth and latency) and the model's KV size per token,
in one JSON document whose schema is `WorkloadFile.model_json_schema()`
(docs/schemas/workload.schema.json; `python -m testbed.validate.report.exported` writes it).
Times are seconds from the run's start, sizes bytes in the modelled cluster's units.
Another simulator reads it, predicts each request's TTFT (and each transfer's time) and
`testbed judge --predictions FILE RUN` judges them (validate/report/predictions.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from testbed.inputs import InputError, converted, read_json
from testbed.records import PARTIAL

FORMAT = "netkv-workload"
VERSION = 1


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class InstanceRecord(_Record):
    name: str
    role: str = Field(description="prefill or decode")
    pod: int
    rack: int = Field(description="global rack index")
    server: int = Field(description="global server index")
    gpus: int


class FabricRecord(_Record):
    """The two-tier-and-core fat-tree: tier 0 NVLink in a server, 1 the ToR, 2 the pod's
    aggregation, 3 the core."""

    pods: int
    racks_per_pod: int
    servers_per_rack: int
    gpus_per_server: int
    tp: int
    tier_bandwidth_gbps: dict[int, float] = Field(description="each link's rate per tier")
    tier_latency_us: dict[int, float] = Field(description="one path's latency per tier")
    tor_oversubscription: float
    core_oversubscription: float
    ecmp: str = Field(description="how the fabric spread flows over equal paths")
    background: dict[int, float] = Field(description="the tiers' background load share")
    instances: list[InstanceRecord]


class RequestRecord(_Record):
    id: str
    arrival_s: float
    input_tokens: int
    output_tokens: int
    hit_tokens: int = Field(description="prefix tokens the prefill instance had cached")
    kv_bytes: float = Field(description="the request's KV cache")
    transfer_bytes: float = Field(description="what crossed the fabric to decode")
    prefill: str | None = Field(description="the instance that ran prefill")
    decode: str | None = Field(description="the instance the scheduler chose to decode")
    tier: int | None = Field(description="the tier its KV crossed")
    measured: bool = Field(description="in the measured window (not warm-up)")
    slo_s: float | None


class TransferRecord(_Record):
    request: str
    shard: int = Field(description="one of the TP streams a KV transfer is split into")
    src: str
    dst: str
    tier: int
    bytes: float
    start_s: float


class CellRecord(_Record):
    cell: str = Field(description="point/scheduler/seed<k>, the key predictions use")
    scheduler: str
    seed: int
    requests: list[RequestRecord]
    transfers: list[TransferRecord]


class WorkloadFile(_Record):
    format: str = FORMAT
    version: int = VERSION
    scenario: str
    engine: str = Field(description="what served it: emulation, ns3 or flow")
    bytes_per_token: float = Field(description="the model's KV bytes per token")
    timing: dict[str, float] = Field(description="the serving timing model the run used "
                                     "(docs/model.md): prefill and decode iteration costs")
    fabric: FabricRecord
    cells: list[CellRecord]


def run_folder(path: Path) -> Path:
    """A run folder, or a validation's packets run inside it."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{path}: no such run folder")
    if (path / "cells").is_dir():
        found = path
    else:
        runs = sorted(path.glob("*-emulation-*")) or sorted(path.glob("*-ns3-*"))
        if not runs:
            raise InputError(f"{path}: not a run folder (no cells/) nor a validation")
        found = runs[-1]
    if (found / PARTIAL).exists():
        raise InputError(f"{found}: the run did not finish (PARTIAL)")
    return found


def _num(value, cast=float):
    return None if value in (None, "") else cast(float(value))


def _fabric(scenario) -> FabricRecord:
    spec = scenario.cluster.spec()
    bg = scenario.network.background
    return FabricRecord(
        pods=spec.pods, racks_per_pod=spec.racks_per_pod,
        servers_per_rack=spec.servers_per_rack, gpus_per_server=spec.gpus_per_server,
        tp=spec.tp, tier_bandwidth_gbps=spec.tier_bandwidth_gbps,
        tier_latency_us=spec.tier_latency_us,
        tor_oversubscription=spec.tor_oversubscription,
        core_oversubscription=spec.core_oversubscription, ecmp=scenario.network.ecmp,
        background={1: bg.tier1, 2: bg.tier2, 3: bg.tier3},
        instances=[InstanceRecord(name=i.name, role=i.role, pod=i.pod, rack=i.rack,
                                  server=i.server, gpus=len(i.gpus)) for i in spec.instances])


def _request(r: dict) -> RequestRecord:
    return RequestRecord(
        id=str(r["id"]), arrival_s=float(r["arrival"]), input_tokens=int(r["input_len"]),
        output_tokens=int(r["output_len"]), hit_tokens=_num(r.get("hit_tokens"), int) or 0,
        kv_bytes=_num(r.get("kv_bytes")) or 0.0,
        transfer_bytes=_num(r.get("transfer_bytes")) or 0.0, prefill=r.get("prefill") or None,
        decode=r.get("decode") or None, tier=_num(r.get("tier"), int),
        measured=str(r.get("measured")).lower() in ("true", "1"), slo_s=_num(r.get("slo_s")))


REQUEST_COLUMNS = ("id", "arrival", "input_len", "output_len")
TRANSFER_COLUMNS = ("request", "shard", "src", "dst", "tier", "bytes", "start")


def _transfer(t: dict) -> TransferRecord | None:
    if t["start"] in (None, ""):
        return None  # never started
    return TransferRecord(request=str(t["request"]), shard=int(t["shard"]), src=t["src"],
                          dst=t["dst"], tier=int(t["tier"]), bytes=float(t["bytes"]),
                          start_s=float(t["start"]))


def export(path: Path) -> WorkloadFile:
    """The workload file of a finished run folder (or a validation's packets run)."""
    from testbed.model.kv import kv_bytes_per_token
    from testbed.scenario import load_scenario

    folder = run_folder(path)
    scenario = load_scenario(folder / "scenario.yaml")
    summary = folder / "summary.json"
    engine = str(read_json(summary).get("engine", "flow")) if summary.exists() else "flow"
    cells = []
    for cell in sorted((folder / "cells").glob("*/*/seed*")):
        key = cell.relative_to(folder / "cells").as_posix()
        _, sched, seed = key.split("/")
        transfers = converted(cell / "transfers.csv", TRANSFER_COLUMNS, _transfer) \
            if (cell / "transfers.csv").exists() else []
        if not seed.removeprefix("seed").isdigit():
            raise InputError(f"{cell}: a cell folder is named seed<N>")
        cells.append(CellRecord(cell=key, scheduler=sched, seed=int(seed.removeprefix("seed")),
                                requests=converted(cell / "requests.csv", REQUEST_COLUMNS,
                                                   _request),
                                transfers=[t for t in transfers if t is not None]))
    if not cells:
        raise InputError(f"{folder}: no cells to export")
    return WorkloadFile(scenario=scenario.name, engine=engine,
                        bytes_per_token=kv_bytes_per_token(scenario.model_spec()),
                        timing={k: float(v) for k, v in scenario.timing.model_dump().items()
                                if isinstance(v, int | float)},
                        fabric=_fabric(scenario), cells=cells)


def schema() -> dict:
    return WorkloadFile.model_json_schema()


if __name__ == "__main__":
    print(json.dumps(schema(), indent=1))
