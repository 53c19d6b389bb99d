"""Decisions taken elsewhere, taken again.

A validation runs the flow model twice: free (its scheduler decides on the model's own
predicted times) and following the packets' own choices. What is left of the gap between
the engines when both place every request alike is the network and serving model; the
rest was scheduling divergence.
"""

from __future__ import annotations

from collections.abc import Mapping

from testbed.model.candidates import find
from testbed.model.schedulers import Decision, SchedulerWrapper


class Followed(SchedulerWrapper):
    """`inner` with its decode choice replaced by the recorded one (request id -> decode
    instance) wherever that instance is a candidate with room for the KV now; elsewhere
    `inner` decides, and the miss is counted. Everything else (feasibility, cost terms,
    the in-flight count, a plugin's guard) stays `inner`'s."""

    def __init__(self, inner, recorded: Mapping[str, str]):
        super().__init__(inner)
        self.recorded = recorded
        self.followed = 0
        self.missed = 0  # recorded, but not a feasible candidate here: inner decided

    def select(self, request, prefill: str, candidates, oracle) -> Decision:
        want = self.recorded.get(request.request_id)
        chosen = find(candidates, want) if want else None
        if chosen is None or not len(self.inner.feasible(request, [chosen])):
            self.missed += want is not None
            return self.inner.select(request, prefill, candidates, oracle)
        self.followed += 1
        return self.inner.commit(request, prefill, chosen, oracle)
