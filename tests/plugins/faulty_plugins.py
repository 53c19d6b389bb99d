"""Schedulers that misbehave on purpose: the guard must report each by name with the
request it failed on, and the run must still decide every request once."""

from __future__ import annotations

import contextlib
import time

from testbed import Decision, Scheduler


def _nth(request, n: int) -> bool:
    return sum(map(ord, request.request_id)) % n == 0


class RaisesSometimes(Scheduler):
    """Least-loaded, but raises on about a third of the requests (after counting its
    transfer in flight: the guard must put the count back)."""

    name = "Raises"

    def rank(self, request, prefill, feasible, oracle):
        if _nth(request, 3):
            self.inflight.increment(0, prefill)
            raise ZeroDivisionError(f"no luck with {request.request_id}")
        return self.pick_min(feasible, self.load_time)


class UnknownInstance(Scheduler):
    name = "Unknown"

    def select(self, request, prefill, candidates, oracle):
        return Decision(decode="no-such-gpu", tier=1)


class BadReturn(Scheduler):
    name = "BadReturn"

    def select(self, request, prefill, candidates, oracle):
        return "i0"


class NeverReturns(Scheduler):
    """Loops forever on some requests (the timer must interrupt it), sleeps past the
    limit on others (the late decision must be thrown away)."""

    name = "NeverReturns"

    def rank(self, request, prefill, feasible, oracle):
        if _nth(request, 5):
            while True:
                pass
        if _nth(request, 7):
            time.sleep(2 * self.ctx.timing.iteration_time(1) + 0.2)
        return self.pick_min(feasible, self.load_time)


class SwallowsEverything(Scheduler):
    """Loops forever inside `except Exception`: the interrupt must still get out."""

    name = "Swallows"

    def rank(self, request, prefill, feasible, oracle):
        while True:
            with contextlib.suppress(Exception):  # swallows all but a BaseException
                time.sleep(0.01)


class CallbackRaises(Scheduler):
    name = "CallbackRaises"

    def rank(self, request, prefill, feasible, oracle):
        return self.pick_min(feasible, self.load_time)

    def transfer_done(self, prefill, tier):
        raise RuntimeError("callback bug")


class BrokenConstructor(Scheduler):
    def __init__(self, ctx):
        raise OSError("cannot open my model weights")

    def rank(self, request, prefill, feasible, oracle):
        raise AssertionError


class NotAScheduler:
    def rank(self, *args):
        return None
