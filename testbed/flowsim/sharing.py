"""Max-min fair rates in the fluid network, by progressive filling: re-shared
incrementally where an event broke few bottlenecks, by component otherwise, both by one
heap-driven fill."""

from __future__ import annotations

from collections.abc import Iterable

from testbed.flowsim.fill import ProgressiveFill
from testbed.flowsim.links import SATURATED, Flow, Hop, LinkState


class MaxMinSharing(ProgressiveFill):
    """FluidNetwork's rate allocation."""

    # An incremental re-sharing that has to re-fill more than this many flows, or this
    # share of all flows, gives up and re-shares the whole component (exact either way;
    # this only bounds wasted work: a component can hold thousands of flows).
    INCREMENTAL_MAX_FLOWS = 64

    INCREMENTAL_MAX_SHARE = 1 / 32

    # -- sharing -----------------------------------------------------------------------
    def recompute(self, touched: Iterable[Hop] | None = None,
                  changed: Iterable[Flow] | None = None) -> None:
        """Strict priority between levels (0 first), max-min fair within a level, by
        progressive filling of each level over what the levels above left.

        With `touched` (the links of the flows that arrived, left or changed) the work is
        what changed, not what exists: first only the flows whose bottleneck broke are
        re-filled (_reshare); with strict priority levels in use, or when that grows too
        large, the connected component of flows and links reachable from those links is
        re-shared whole. Max-min sharing in one component does not depend on any other,
        so either is exact (SimGrid's lazy max-min re-solves only the constraints a
        modified variable touches in the same spirit: Casanova et al., "Versatile,
        scalable, and accurate simulation of distributed applications and platforms",
        JPDC 2014).

        `changed`: the flows whose own state changed (arrived, cap or window moved), when
        nothing else did: no other flow's share can have broken yet, so only these are
        checked first (None: any flow on the touched links may be affected, as after a
        weight change)."""
        if touched is None:
            self._recompute_links(None)
        else:
            self._recompute_links({self.links[hop].index for hop in touched
                                   if hop in self.links}, changed=changed)

    def _recompute_links(self, touched: set[int] | None, gone: list[Flow] = (),
                         changed: Iterable[Flow] | None = None) -> None:
        """Re-share after a change on `touched` links (None: anything may have changed);
        `gone`: flows just taken off them, whose rates the links still carry; `changed`:
        see recompute."""
        if touched is not None:
            for h in touched:
                self._umax.pop(h, None)
            if self.incremental and not self._leveled and self._reshare(touched, gone,
                                                                        changed):
                return
        if touched is None:
            links = [lk.index for lk in self.link_list if lk.flows or lk.kv_rate]
            flows = list(self.flows)
            self._leveled = sum(1 for f in self.flows.values() if f.level)
            self._umax.clear()
        else:
            links, flows = self._component(touched)
        now = self.last_update
        for h in links:
            self.link_list[h].settle(now)
        for h in links:
            self.link_list[h].kv_rate = 0.0
        residual = {h: self.link_list[h].kv_capacity for h in links
                    if self.link_list[h].flows}
        by_level: dict[int, set[int]] = {}
        for fid in flows:
            by_level.setdefault(self.flows[fid].level, set()).add(fid)
        for level in sorted(by_level):
            self._fill(by_level[level], residual)
        umax = self._umax
        for h in links:
            umax.pop(h, None)

    # -- incremental re-sharing --------------------------------------------------------
    def _reshare(self, touched: set[int], gone: list[Flow],
                 changed: Iterable[Flow] | None = None) -> bool:
        """Re-fill only the flows whose max-min condition broke; False if that grew past
        INCREMENTAL_MAX_FLOWS (the caller then re-shares the whole component).

        A max-min allocation is the unique feasible one in which every flow is at its cap
        or crosses a saturated link on which no flow has a larger rate / weight (its
        bottleneck). A change can break that only for flows on links whose load or rates
        changed, and only through a link that is or was saturated. So: check those flows;
        re-fill the broken ones (set S) over what the others leave, others held fixed;
        a flow of S that still has no bottleneck is held back by flows with larger shares
        on its saturated links, which join S; every link whose rates changed has its flows
        checked again; repeat until nothing is broken. At that point every flow has its
        bottleneck, so the allocation is the max-min one, exactly. In a fabric where one
        arrival couples hundreds of flows it re-fills the handful whose rates move (the
        partial invalidation of SimGrid's lazy max-min, Casanova et al. JPDC 2014, taken
        from constraints to bottlenecks)."""
        flows, link_list = self.flows, self.link_list
        ever_saturated = {h for h in touched if self._saturated(link_list[h])}
        now = self.last_update
        for flow in gone:  # their bytes stop: the links carry what is left
            for h in flow.links:
                link = link_list[h]
                link.settle(now)
                link.kv_rate -= flow.rate
        unfit: set[int] = set()
        if changed is not None and not gone:  # nobody else's situation moved yet
            check = {f.flow_id for f in changed if f.flow_id in flows}
        elif gone and changed is None:  # freed capacity matters where a link was full
            check = {fid for h in touched if h in ever_saturated for fid in link_list[h].flows}
        else:
            check = {fid for h in touched for fid in link_list[h].flows}
        refill: set[int] = set()
        fit = self._fit
        while True:
            unfit |= {fid for fid in check if fid not in refill and not fit(flows[fid])}
            if not unfit:
                return True
            refill |= unfit
            if len(refill) > max(self.INCREMENTAL_MAX_FLOWS,
                                 len(flows) * self.INCREMENTAL_MAX_SHARE):
                return False
            moved = self._refill(refill, ever_saturated)
            check = {fid for h in moved
                     if h in ever_saturated or link_list[h].kv_rate >= link_list[h].kv_full
                     for fid in link_list[h].flows if fid not in refill}
            unfit = set()
            for fid in refill:
                flow = flows[fid]
                if not fit(flow):  # held back on a saturated link by larger shares
                    share = flow.rate / flow.weight
                    for h in flow.links:
                        link = link_list[h]
                        if link.kv_rate >= link.kv_full:
                            unfit.update(g for g in link.flows if g not in refill
                                         and flows[g].rate / flows[g].weight > share)

    def _refill(self, refill: set[int], ever_saturated: set[int]) -> set[int]:
        """Max-min among `refill` over what the other flows leave; returns the links
        whose rates changed."""
        flows, link_list, now = self.flows, self.link_list, self.last_update
        members = [flows[fid] for fid in refill]
        before = []
        seen: set[int] = set()
        for flow in members:  # take their rates off their links
            rate = flow.rate
            before.append(rate)
            for h in flow.links:
                link = link_list[h]
                if h not in seen:  # first: whether it was full, and settle it
                    seen.add(h)
                    if link.kv_rate >= link.kv_full:
                        ever_saturated.add(h)
                    t0 = link.t0
                    if t0 < now:  # link.settle(now), inlined
                        if link.kv_rate:
                            link.kv_bytes += link.kv_rate * (now - t0)
                        if link.background:
                            link.bg_bytes += link.background * link.capacity * (now - t0)
                        link.t0 = now
                link.kv_rate -= rate
        self._fill(set(refill))
        changed = {h for flow, rate in zip(members, before, strict=True) if flow.rate != rate
                   for h in flow.links}
        umax = self._umax
        for h in changed:
            umax.pop(h, None)
            link = link_list[h]
            if link.kv_rate >= link.kv_full:
                ever_saturated.add(h)
        return changed

    @staticmethod
    def _saturated(link: LinkState) -> bool:
        return link.kv_rate >= link.kv_full

    def _fit(self, flow: Flow) -> bool:
        """Whether the flow is at its cap or has a bottleneck (see _reshare)."""
        cap, window = flow.cap, flow.window_cap  # flow.effective_cap(), inlined: hot
        if window is not None and (cap is None or window < cap):
            cap = window
        if cap is not None:
            if flow.rate > cap / SATURATED:  # over a cap lowered since
                return False
            if flow.rate >= cap * SATURATED:
                return True
        share = flow.rate / flow.weight
        link_list, umax = self.link_list, self._umax
        last = flow.bottleneck  # where it was held last time: most often still is
        for h in flow.links if last < 0 else (last, *flow.links):
            link = link_list[h]
            if link.kv_rate >= link.kv_full:
                largest = umax.get(h)
                if largest is None:
                    largest = self._largest_share(h)
                if share >= largest * SATURATED:
                    flow.bottleneck = h
                    return True
        return False

    def _largest_share(self, h: int) -> float:
        got = self._umax.get(h)
        if got is None:
            flows, got = self.flows, 0.0  # rates are never negative
            for fid in self.link_list[h].flows:  # a loop: a third faster than max(genexpr)
                flow = flows[fid]
                share = flow.rate / flow.weight
                if share > got:
                    got = share
            self._umax[h] = got
        return got

    def _component(self, touched: set[int]) -> tuple[list[int], list[int]]:
        """The links and flows reachable from `touched` through flows sharing links."""
        link_list, flows = self.link_list, self.flows
        seen_links = set(touched)
        seen_flows: set[int] = set()
        stack = list(seen_links)
        while stack:
            for fid in link_list[stack.pop()].flows:
                if fid not in seen_flows:
                    seen_flows.add(fid)
                    for h in flows[fid].links:
                        if h not in seen_links:
                            seen_links.add(h)
                            stack.append(h)
        return list(seen_links), list(seen_flows)
