"""What every worker process of one emulated run needs to know: written once, read by all."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testbed.clock import RunClock
from testbed.scenario import load_scenario


@dataclass(frozen=True)
class RunConfig:
    scenario: str  # the cell's scenario.yaml (sweep point applied)
    scheduler: str
    seed: int
    t0: float  # wall-clock epoch of modelled time zero
    dilation: float
    scale: float
    router_socket: str  # a socket file, or tcp:HOST:PORT when workers run on other machines
    out: str  # where the router writes the run's records
    oracle_url: str
    kv_port: int
    bg_port: int
    hosts: dict[str, str] = field(default_factory=dict)  # instance -> IP on the fabric
    controller_pid: int | None = None  # for controller_down faults
    control_token: str | None = None  # a worker's hello must carry it (TCP control plane)

    def save(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=1))
        return path

    @classmethod
    def load(cls, path: Path) -> RunConfig:
        return cls(**json.loads(Path(path).read_text()))

    def clock(self, t0: float | None = None) -> RunClock:
        """The run's clock, from its own t0 or another (a worker's before the start)."""
        return RunClock(self.t0 if t0 is None else t0, self.dilation)

    def load_scenario(self):
        return load_scenario(self.scenario)
