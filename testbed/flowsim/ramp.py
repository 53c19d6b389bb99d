"""The TCP model's time course of a flow in the fluid network: its handshake, slow-start
window doubling every round trip, its seniority against later streams, its silence on
joining a busy path, and the time competitors cost it."""

from __future__ import annotations

import heapq

from testbed.flowsim.links import Flow
from testbed.model import tcp as tcpmodel


class TcpRamp:
    """FluidNetwork's TCP terms (testbed/model/tcp.py) applied to flows."""

    def _contention_delay(self, flow: Flow, now: float) -> float:
        """tcp.contention_delay for a flow whose bytes are out now: its time beyond what
        it would have taken alone on its path (with its own transfer's other streams)."""
        idle = self.tcp.contention_idle
        if not idle:
            return 0.0
        rate = min(self.links[h].kv_capacity for h in flow.path) * flow.alone_share
        if rate <= 0:
            return 0.0
        alone = tcpmodel.lone_transfer_time(flow.size, rate, flow.rtt, self.tcp) \
            - self.tcp.tail_rtts * flow.rtt
        return tcpmodel.contention_delay(now - flow.start, alone, idle)

    def _path_busy(self, flow: Flow) -> bool:
        """Whether others keep a link of the flow's path saturated as it joins (tcp.join_stall):
        its own rate is still zero, so the link's rate is theirs."""
        link_list = self.link_list
        return any(0.0 < link_list[h].kv_full <= link_list[h].kv_rate for h in flow.links)

    def _seniority(self, now: float) -> float:
        """tcp.seniority weight of a stream starting now, against the network's epoch. The
        epoch moves up before weights would leave the float range: every live flow's
        weight is then scaled alike, which changes no rate (max-min depends on weights
        only through their ratios)."""
        h = self.tcp.seniority_s
        if self._epoch is None:
            self._epoch = now
        elif (now - self._epoch) / h > tcpmodel.MAX_SENIORITY_DOUBLINGS / 2:
            scale = tcpmodel.seniority(now - self._epoch, h)
            top = tcpmodel.seniority(tcpmodel.MAX_SENIORITY_DOUBLINGS * h, h)
            for flow in self.flows.values():  # one stalled for ages: as old as any
                flow.weight = min(flow.weight * scale, top)
            self._umax.clear()
            self._epoch = now
        return tcpmodel.seniority(self._epoch - now, h)

    def _ramp(self, now: float) -> None:
        """Slow start: every due window doubles; a window that no longer binds (the flow
        gets less than it allows) leaves slow start for good, as TCP does at its first loss."""
        due: set[int] = set(self._unbound)
        ramps = self._ramps
        while ramps and ramps[0][0] <= now + 1e-12:
            when, fid = heapq.heappop(ramps)
            flow = self.flows.get(fid)
            if flow is not None and flow.ramp_at == when:
                due.add(fid)
        changed: set[int] = set()
        capped: list[Flow] = []  # flows whose window changed
        for fid in sorted(due):
            flow = self.flows[fid]
            if flow.ramp_at is None:
                continue
            capped.append(flow)
            if flow.window_cap is not None and 0.0 < flow.rate < flow.window_cap * (1 - 1e-9):
                flow.window_cap = flow.ramp_at = None
                self._unbound.discard(fid)
                changed.update(flow.links)
                continue
            while flow.ramp_at is not None and flow.ramp_at <= now + 1e-12:
                flow.rounds += 1  # (several rounds at once only if the caller skipped events)
                flow.window_cap = tcpmodel.window_rate(flow.rounds, flow.rtt, self.tcp)
                flow.ramp_at += flow.rtt
                if flow.window_cap >= min(self.links[h].capacity for h in flow.path):
                    flow.window_cap = flow.ramp_at = None
                changed.update(flow.links)
            if flow.ramp_at is not None:
                heapq.heappush(ramps, (flow.ramp_at, fid))
                self._check_window(flow)
            else:
                self._unbound.discard(fid)
        if changed:
            self._recompute_links(changed, changed=capped)
