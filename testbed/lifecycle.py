"""The life of one request, shared by both engines: its state record and its CSV row.

The flow simulator fills a RequestState from simulated events, the emulation's router
from worker reports; both write requests.csv through `request_row`, so the two engines'
records mean the same thing column by column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from testbed.model.recovery import MIGRATE, RECOMPUTE
from testbed.workloads.requests import Request

# Served: completed, or completed after a decode failure by migrating or recomputing KV.
SERVED_STATES = ("completed", "migrated", "recomputed")
TERMINAL_STATES = (*SERVED_STATES, "aborted", "rejected", "failed")


@dataclass(eq=False)
class RequestState:
    """Everything that happens to one request; becomes one row of requests.csv."""

    req: Request
    measured: bool
    kv_bytes: float
    prefill: str | None = None
    prefill_start: float | None = None
    prefill_end: float | None = None
    decode: str | None = None
    tier: int | None = None
    hit_tokens: int = 0
    reuse_tokens: int = 0  # prefix KV fetched from a holder instead of computed
    eff_bytes: float = 0.0
    predicted_transfer_s: float | None = None
    transfer_start: float | None = None
    transfer_end: float | None = None
    flows_left: int = 0
    reserved: float = 0.0
    held_blocks: int = 0  # leading cache blocks pinned on its decode instance
    admit_iter: int = 0
    entry_iter_s: float | None = None
    first_token: float | None = None
    done: float | None = None
    state: str | None = None  # one of TERMINAL_STATES
    reason: str = ""
    recovery: str = ""  # migrate | recompute | abort, when its decode instance failed
    scheduler_fault: str = ""  # a plugin's decision thrown away, and why (model/extensions/guard.py)

    def terminate(self, state: str, reason: str = "") -> None:
        if self.state is not None:
            raise RuntimeError(f"{self.req.request_id} already ended as {self.state}")
        self.state = state
        self.reason = reason



def new_request(req: Request, warmup_s: float, measure_s: float,
                bytes_per_token: float) -> RequestState:
    """A request's state as it arrives: measured if it arrives inside the measurement
    window, its full KV size."""
    return RequestState(req=req, measured=warmup_s <= req.arrival_s < warmup_s + measure_s,
                        kv_bytes=float(bytes_per_token * req.input_len))


def served_state(recovery: str) -> str:
    """How a served request ends: completed, or migrated / recomputed after its decode
    instance failed (`recovery` is RequestState.recovery)."""
    return {MIGRATE: "migrated", RECOMPUTE: "recomputed"}.get(recovery, "completed")


def request_row(rs: RequestState, slo_s: float) -> dict:
    """One requests.csv row; both engines write this shape."""
    req = rs.req
    ttft = rs.first_token - req.arrival_s if rs.first_token is not None else None
    tbt = None
    if rs.state in SERVED_STATES:
        if req.output_len > 1:
            tbt = (rs.done - rs.first_token) / (req.output_len - 1)
        else:
            tbt = rs.entry_iter_s
    return {
        "id": req.request_id, "arrival": req.arrival_s, "input_len": req.input_len,
        "output_len": req.output_len, "measured": rs.measured,
        "prefill": rs.prefill, "decode": rs.decode, "tier": rs.tier,
        "hit_tokens": rs.hit_tokens, "reuse_tokens": rs.reuse_tokens, "kv_bytes": rs.kv_bytes,
        "transfer_bytes": rs.eff_bytes,
        "prefill_start": rs.prefill_start, "prefill_end": rs.prefill_end,
        "transfer_start": rs.transfer_start, "transfer_end": rs.transfer_end,
        "predicted_transfer_s": rs.predicted_transfer_s,
        "first_token": rs.first_token, "done": rs.done, "ttft": ttft, "tbt": tbt,
        "slo_s": slo_s,
        "slo_met": ttft is not None and ttft <= slo_s and not math.isnan(ttft),
        "state": rs.state, "reason": rs.reason, "recovery": rs.recovery,
        "scheduler_fault": rs.scheduler_fault,
    }
