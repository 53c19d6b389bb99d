"""What the caller of an emulated run hears and decides (orchestrator.run_emulation)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from testbed.emulation.net import EmulatedNetwork


@dataclass
class RunHooks:
    """What the caller of an emulated run hears and decides, each optional (as Faucet's
    valve hands work to its managers): `on_step(label, wall_s)` as each run or fabric
    starts; `on_note(line)` how many fabrics and why, and when they shrink; `on_live(doc)`
    about once a second during a run (LiveWatch); `on_fabric(network, celldir)` once per
    sweep point with its fabric up, before the point's runs (validate calibrates there;
    with fabrics side by side, on a fabric of their kind built for it);
    `after_round(index, seeds, folder)`, once every scheduler of a point has run a round
    (records written), whether to run the point's next round (a sequential validation
    stops early there)."""

    on_step: Callable[[str, float], None] | None = None
    on_note: Callable[[str], None] | None = None
    on_live: Callable[[dict], None] | None = None
    on_fabric: Callable[[EmulatedNetwork, Path], None] | None = None
    after_round: Callable[[int, list[int], Path], bool] | None = None

    def step(self, label: str, wall_s: float = 0.0) -> None:
        if self.on_step:
            self.on_step(label, wall_s)

    def note(self, line: str) -> None:
        if self.on_note:
            self.on_note(line)

    def fabric(self, network: EmulatedNetwork, celldir: Path) -> None:
        if self.on_fabric is not None:
            self.on_fabric(network, celldir)

    def go_on(self, index: int, seeds: list[int], root: Path) -> bool:
        return self.after_round is None or bool(self.after_round(index, seeds, root))
