"""Path choice in the fluid network: ECMP over a pair's live paths, per flow or per
transfer, and a path's base round trip."""

from __future__ import annotations

import zlib

from testbed.flowsim.links import Flow, Hop
from testbed.model import tcp as tcpmodel


class PathChoice:
    """FluidNetwork's paths: which of a pair's equal-cost paths a flow takes."""

    # -- paths -----------------------------------------------------------------------
    def _all_paths(self, src: str, dst: str) -> list[list[Hop]]:
        paths = self._path_cache.get((src, dst))
        if paths is None:
            paths = self._path_cache[(src, dst)] = self.spec.paths(src, dst)
        return paths

    def live_paths(self, src: str, dst: str) -> list[list[Hop]]:
        """Equal-cost paths with no failed link; all of them if none is whole (the
        flows then wait on a dead link until it comes back: a partition)."""
        paths = self._all_paths(src, dst)
        if not self._links_down:
            return paths
        live = [p for p in paths if not any(self.links[h].down for h in p)]
        return live or paths

    def ecmp_path(self, src: str, dst: str) -> list[Hop]:
        """Uniform random choice among equal-cost live paths, one per flow (seeded).
        With every link up only the chosen path is built (the same draw, the same path)."""
        if self._links_down:
            paths = self.live_paths(src, dst)
            return paths[self.rng.randrange(len(paths))] if len(paths) > 1 else paths[0]
        n = self.spec.path_count(src, dst)
        return self.spec.path_at(src, dst, self.rng.randrange(n) if n > 1 else 0)

    def pair_path(self, src: str, dst: str) -> list[Hop]:
        """Per-pair ECMP: the path the emulated fabric's controller pins for this pair."""
        path = self._pairs.path(src, dst)
        if any(self.links[h].down for h in path):  # the controller re-hashes on live paths
            live = self.live_paths(src, dst)
            path = live[zlib.crc32(f"{src}>{dst}".encode()) % len(live)]
        return path

    def transfer_paths(self, src: str, dst: str, mode: str, flows: int) -> list[list[Hop]]:
        """One path per flow of a transfer under `network.ecmp` (topologies/routing.py
        says what each mode means)."""
        if mode == "per-pair":
            return [self.pair_path(src, dst)] * flows
        if mode == "per-flow":
            return [self.ecmp_path(src, dst) for _ in range(flows)]
        return [self.ecmp_path(src, dst)] * flows

    def _set_path(self, flow: Flow, path: list[Hop]) -> None:
        for h in flow.links:
            self.link_list[h].flows.discard(flow.flow_id)
        flow.path = path
        flow.links = tuple(self.links[hop].index for hop in path)
        flow.bottleneck = -1
        for h in flow.links:
            self.link_list[h].flows.add(flow.flow_id)

    def path_rtt(self, path: list[Hop], stream_bytes: float | None = None) -> float:
        links = [self.links[h] for h in path]
        tier = max((link.tier for link in links), default=0)
        return tcpmodel.path_rtt(self._latency_s.get(tier, 0.0),
                                 [link.capacity for link in links], self.tcp, stream_bytes)
