"""Weighted progressive filling, the step every re-sharing of the fluid network ends in:
max-min rates for a set of flows over what the links leave them."""

from __future__ import annotations

import heapq


class ProgressiveFill:
    """MaxMinSharing's fill (on FluidNetwork: flows, link_list, _set_rate)."""

    def _fill(self, unfrozen: set[int], residual: dict[int, float] | None = None) -> None:
        """Weighted progressive filling: a link's residual is split in proportion to its
        unfrozen flows' weights; a capped flow freezes at its cap when that binds first.
        `residual`: what each link has left for these flows, brought down as they freeze
        (for a next priority level); None: what the links leave now, read only here.

        The bottleneck link comes from a lazy min-heap of residual / weight: a link's ratio
        only grows as flows on it freeze (each freezes at or below the current minimum),
        so a stale entry is re-pushed with its current ratio when it surfaces; capped flows
        wait in a heap of cap / weight. Each step costs a few heap operations, not a scan
        of every link and flow (m3's flowSim, by contrast, scans for the bottleneck link at
        every step of every event)."""
        flows, link_list = self.flows, self.link_list
        keep = residual is not None
        if len(unfrozen) == 1:  # most incremental re-fills: the same steps, without heaps
            self._fill_one(unfrozen, residual)
            return
        active, weights, caps = self._shared_links(unfrozen)
        if not keep:
            residual = {h: link_list[h].kv_capacity - link_list[h].kv_rate for h in active}
        heap = [(residual[h] / weights[h], h) for h in active]
        alone = self._lone_bounds(unfrozen, residual, keep, active, heap)
        heapq.heapify(heap)
        while unfrozen:
            ratio, h = heap[0]
            members = active.get(h)
            if members is None:
                fid = alone.get(h)
                if fid is None or fid not in unfrozen:
                    heapq.heappop(heap)
                    continue
                members = (fid,)
            else:
                current = residual[h] / weights[h]
                if current != ratio:
                    heapq.heapreplace(heap, (current, h))
                    continue
            unit = max(ratio, 0.0)
            while caps and caps[0][1] not in unfrozen:
                heapq.heappop(caps)
            if caps and caps[0][0] < unit:
                _, fid = heapq.heappop(caps)
                self._freeze(fid, flows[fid].effective_cap(), unfrozen, residual, active,
                             weights, keep)
                continue
            for fid in list(members):
                flows[fid].bottleneck = h  # where its fit is checked first
                self._freeze(fid, unit * flows[fid].weight, unfrozen, residual, active,
                             weights, keep)

    def _fill_one(self, unfrozen: set[int], residual: dict[int, float] | None) -> None:
        """_fill of a lone flow: its tightest link or its cap."""
        keep = residual is not None
        fid = next(iter(unfrozen))
        flow = self.flows[fid]
        w = flow.weight
        if keep:
            unit = max(min(residual[h] / w for h in flow.links), 0.0)
        else:
            link_list = self.link_list
            unit = max(min((link_list[h].kv_capacity - link_list[h].kv_rate) / w
                           for h in flow.links), 0.0)
        cap = flow.effective_cap()
        rate = cap if cap is not None and cap / w < unit else unit * w
        self._freeze(fid, rate, unfrozen, residual if keep else {}, {}, {}, keep)

    def _shared_links(self, unfrozen: set[int]) -> tuple[dict[int, set[int]],
                                                         dict[int, float],
                                                         list[tuple[float, int]]]:
        """Links two or more of these flows cross, tracked with their unfrozen flows and
        weights, and the capped flows' heap of cap / weight. A link one flow crosses alone
        only bounds that flow, at a ratio that cannot move before it freezes, so only the
        flow's smallest such bound enters the heap (_lone_bounds), and freezing it touches
        no bookkeeping there (in a re-fill most links are a lone flow's: its NICs, its
        path beyond the shared uplink)."""
        flows = self.flows
        active: dict[int, set[int]] = {}
        weights: dict[int, float] = {}
        first: dict[int, int] = {}
        caps: list[tuple[float, int]] = []
        for fid in unfrozen:
            flow = flows[fid]
            w = flow.weight
            for h in flow.links:
                other = first.setdefault(h, fid)
                if other != fid:
                    members = active.get(h)
                    if members is None:
                        active[h] = {other, fid}
                        weights[h] = flows[other].weight + w
                    else:
                        members.add(fid)
                        weights[h] += w
            cap, window = flow.cap, flow.window_cap  # flow.effective_cap(), inlined
            if window is not None and (cap is None or window < cap):
                cap = window
            if cap is not None:
                caps.append((cap / w, fid))
        heapq.heapify(caps)
        return active, weights, caps

    def _lone_bounds(self, unfrozen: set[int], residual: dict[int, float], keep: bool,
                     active: dict[int, set[int]], heap: list) -> dict[int, int]:
        """Each flow's tightest lone link pushed on `heap`; returns that link -> the flow.
        `keep` False: a lone link's residual is what it leaves now (see _fill)."""
        flows, link_list = self.flows, self.link_list
        alone: dict[int, int] = {}
        for fid in unfrozen:
            flow = flows[fid]
            w, best = flow.weight, None
            for h in flow.links:
                if h not in active:
                    if keep:
                        entry = (residual[h] / w, h)
                    else:
                        link = link_list[h]
                        entry = ((link.kv_capacity - link.kv_rate) / w, h)
                    if best is None or entry < best:
                        best = entry
            if best is not None:
                heap.append(best)
                alone[best[1]] = fid
        return alone

    def _freeze(self, fid: int, rate: float, unfrozen: set[int], residual: dict[int, float],
                active: dict[int, set[int]], weights: dict[int, float], keep: bool) -> None:
        """Fix one flow's rate; `keep`: bring every link's residual down, not only those
        of the links still active (see _fill)."""
        flow = self.flows[fid]
        self._set_rate(flow, rate)
        unfrozen.discard(fid)
        for h in flow.links:
            self.link_list[h].kv_rate += rate
            members = active.get(h)
            if members is not None:
                members.discard(fid)
                if members:
                    residual[h] -= rate
                    left = weights[h] - flow.weight
                    if left <= flow.weight * 1e-9:  # cancelled: weights orders of
                        left = sum(self.flows[g].weight for g in members)  # apart (seniority)
                    weights[h] = left
                    continue
                del active[h]
                del weights[h]
            if keep:
                residual[h] -= rate
