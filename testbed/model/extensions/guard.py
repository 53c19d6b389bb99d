"""Running a scheduler nobody here wrote: its failures become records, not crashes.

A plugin's decision is checked before the control plane acts on it. When the plugin
raises, returns something that is not a Decision, names an instance that is not among
the candidates, or takes longer than its time limit, the decision is thrown away (the
plugin's in-flight counts restored), the request is placed by the fallback (LA: the
smallest T_queue + T_decode, sharing the plugin's in-flight counter) and the fault is
kept: plugin, request, what went wrong. Every request is still decided exactly once, so
the run keeps its request conservation; the records say which decisions were not the
plugin's (requests.csv `scheduler_fault`, summary.json `scheduler_faults`).

The time limit is enforced twice: a decision that returns late is thrown away, and in the
main thread (the flow simulator, the packet router) an interval timer interrupts one that
never returns.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from collections import Counter

from testbed.model.candidates import find
from testbed.model.schedulers import Decision, LoadAware, Scheduler, SchedulerWrapper

RAISED, UNKNOWN_INSTANCE, BAD_RETURN, TOO_SLOW, CALLBACK = (
    "raised", "unknown_instance", "bad_return", "too_slow", "callback_raised")
KINDS = (RAISED, UNKNOWN_INSTANCE, BAD_RETURN, TOO_SLOW, CALLBACK)


class Overtime(BaseException):
    """Raised into a decision that ran past its limit (BaseException: a plugin's own
    `except Exception` cannot swallow it)."""


class Deadline:
    """An interval timer that interrupts the main thread after `seconds`; elsewhere (a
    thread pool's worker) nothing: the late decision is still thrown away afterwards."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.armed = False
        self.previous = None

    def __enter__(self):
        if (threading.current_thread() is threading.main_thread()
                and hasattr(signal, "setitimer")
                and signal.getitimer(signal.ITIMER_REAL)[0] == 0.0):
            self.previous = signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
            self.armed = True
        return self

    @staticmethod
    def _fire(_signum, _frame):
        raise Overtime

    def __exit__(self, *_exc):
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
            signal.signal(signal.SIGALRM, self.previous)
        return False


class GuardedScheduler(SchedulerWrapper):
    """A plugin behind the checks above; everything else is the plugin's own."""

    def __init__(self, key: str, inner: Scheduler, timeout_s: float):
        super().__init__(inner)
        self.key = key
        self.timeout_s = timeout_s
        self.fallback = LoadAware(inner.ctx)
        self.fallback.inflight = inner.inflight  # one count of transfers in flight
        self.counts: Counter[str] = Counter()

    def select(self, request, prefill: str, candidates, oracle) -> Decision:
        before = self.inner.inflight.snapshot(prefill)
        t0 = time.perf_counter()
        kind, detail, decision = None, "", None
        try:
            with Deadline(self.timeout_s):
                decision = self.inner.select(request, prefill, candidates, oracle)
        except Overtime:
            kind, detail = TOO_SLOW, f"still deciding after {self.timeout_s * 1e3:g} ms"
        except Exception as exc:  # noqa: BLE001 - the plugin's error, recorded by name
            kind, detail = RAISED, f"{type(exc).__name__}: {exc}"
        elapsed = time.perf_counter() - t0
        if kind is None:
            kind, detail = self._check(decision, prefill, candidates, elapsed)
        if kind is None:
            tier = oracle.tier(prefill, decision.decode) if decision.decode else None
            return decision if tier == decision.tier else dataclasses.replace(decision, tier=tier)
        self.inner.inflight.restore(prefill, before)
        fault = self._record(kind, detail, request.request_id)
        return dataclasses.replace(self.fallback.select(request, prefill, candidates, oracle),
                                   fault=fault)

    def _check(self, decision, prefill, candidates, elapsed: float) -> tuple[str | None, str]:
        if elapsed > self.timeout_s:
            return TOO_SLOW, f"took {elapsed * 1e3:.1f} ms (limit {self.timeout_s * 1e3:g} ms)"
        if not isinstance(decision, Decision):
            return BAD_RETURN, f"returned {type(decision).__name__}, not a Decision"
        if decision.decode is not None and find(candidates, decision.decode) is None:
            return UNKNOWN_INSTANCE, (f"chose {decision.decode!r}, which is not among the "
                                      f"{len(candidates)} candidates")
        return None, ""

    def _record(self, kind: str, detail: str, request_id: str) -> str:
        self.counts[kind] += 1
        return f"{self.key} {kind} on {request_id}: {detail}; placed by {self.fallback.name}"

    def transfer_done(self, prefill: str, tier: int) -> None:
        before = self.inner.inflight.raw(tier, prefill)
        try:
            self.inner.transfer_done(prefill, tier)
        except Exception as exc:  # noqa: BLE001 - recorded; the count is released anyway
            self._record(CALLBACK, f"transfer_done({prefill!r}, {tier}) raised "
                         f"{type(exc).__name__}: {exc}", "")
            if self.inner.inflight.raw(tier, prefill) == before > 0:
                self.inner.inflight.decrement(tier, prefill)

    def report(self) -> dict[str, int]:
        """summary.json's `scheduler_faults`: decisions replaced, per kind (which requests:
        requests.csv's `scheduler_fault` column)."""
        return {"total": sum(self.counts.values()), **{k: self.counts.get(k, 0) for k in KINDS}}


def fault_report(scheduler) -> dict[str, int]:
    """The guard's report, or the same keys with zeros for a built-in scheduler."""
    if isinstance(scheduler, GuardedScheduler):
        return scheduler.report()
    return {"total": 0, **dict.fromkeys(KINDS, 0)}
