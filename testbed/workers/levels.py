"""Priority levels at a sending worker: the flow simulator's policy, per layer chunk.

One SenderLevels per worker process holds what that sender knows of its own outgoing
KV flows (what MFS's host-side arbitration sees): each shard's remaining bytes, its
transfer's deadline and path bandwidth. Shard threads ask it for a level at every layer
boundary (kvstream.Marking); the decision is testbed.model.mfs.flow_level, the same
function the flow simulator calls. Units: modelled seconds and bytes inside, wire bytes
and wall seconds at the socket (scale and time dilation between them).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

from testbed.model import mfs, reuse
from testbed.workers.kvstream import Marking


@dataclass
class _Transfer:
    deadline: float
    bandwidth: float  # modelled bytes/s of the whole transfer's path
    remaining: dict[int, float] = field(default_factory=dict)  # shard -> modelled bytes
    level: dict[int, int] = field(default_factory=dict)


class SenderLevels:
    def __init__(self, scenario, loop, scale: float, n_layers: int):
        net = scenario.network
        self.policy = net.flow_policy
        self.levels = net.priority_levels
        self.top, self.ratio = net.mfs_theta_top, net.mfs_theta_ratio
        self.pruning = net.mfs_pruning
        self.loop = loop  # its clock is replaced when the run starts: read it each time
        self.scale = scale
        self.n_layers = n_layers
        self.nic_bw = scenario.cluster.host_gbps * 1e9 / 8  # what a sender's flows share
        # a stalled sender re-asks for its level as often as the flow model re-evaluates
        self.recheck_s = loop.clock.spans.wall(net.reprioritize_s)
        self.lock = threading.Lock()
        self.transfers: dict[str, _Transfer] = {}
        self.pruned: set[str] = set()

    def _wire_rate(self, modelled_bytes_per_s: float) -> float | None:
        if math.isinf(modelled_bytes_per_s):
            return None
        return max(self.loop.clock.spans.wall_rate(modelled_bytes_per_s * self.scale), 1.0)

    def p2d(self, request: str, deadline: float, bandwidth: float, shards: int):
        """A Marking factory for the shards of one P2D transfer (explicit deadline)."""
        with self.lock:
            self.transfers[request] = _Transfer(deadline, bandwidth)
        per_flow = bandwidth / max(shards, 1)

        def marking(shard: int) -> Marking:
            def decide(sent: int, total: int) -> tuple[int, float | None]:
                now = self.loop.clock.now()
                with self.lock:
                    t = self.transfers[request]
                    t.remaining[shard] = (total - sent) / self.scale
                    if self.policy == "mfs":
                        self._prune(now)
                    view = mfs.FlowView(f"{request}/{shard}", t.remaining[shard], deadline,
                                        bandwidth=per_flow)
                    level = mfs.flow_level(self.policy, view, now,
                                           t.level.get(shard, self.levels - 1),
                                           request in self.pruned, self.levels, self.top,
                                           self.ratio)
                    t.level[shard] = level
                rate = None
                if self.policy == "karuna":
                    rate = self._wire_rate(mfs.karuna_min_rate(view.remaining, deadline, now))
                return level, rate

            return Marking(decide, self.levels, self.n_layers, self.recheck_s)

        return marking

    def done(self, request: str) -> None:
        with self.lock:
            self.transfers.pop(request, None)

    def _prune(self, now: float) -> None:
        jobs = [mfs.Job(rid, t.deadline, sum(t.remaining.values()) / self.nic_bw,
                        sum(t.remaining.values()) / t.bandwidth)
                for rid, t in self.transfers.items() if rid not in self.pruned]
        self.pruned |= mfs.prune_infeasible(jobs, now, self.pruning)

    def fetch(self, request: str, expected_start: float, layer_s: float, bandwidth: float
              ) -> Marking:
        """A Marking for a KV-reuse fetch (implicit deadline: RLI)."""
        current = [self.levels - 1]

        def decide(sent: int, total: int) -> tuple[int, float | None]:
            now = self.loop.clock.now()
            r = reuse.retrieval_rli(now, expected_start, layer_s, sent, total, self.n_layers)
            view = mfs.FlowView(request, (total - sent) / self.scale, None, rli=r,
                                bandwidth=bandwidth)
            current[0] = mfs.flow_level(self.policy, view, now, current[0], False,
                                        self.levels, self.top, self.ratio)
            return current[0], None

        return Marking(decide, self.levels, self.n_layers, self.recheck_s)
