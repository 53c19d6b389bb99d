"""Did the machine drop or hold packets before the emulated fabric queued them? The
judgement of what testbed.datapath.input_queues read during a run.

A drop there is a loss the modelled fabric does not have: a retransmission, or a
timeout, that neither the switch's queue nor the flow model explains. So any drop fails
the run. Measured on the 2-core machine (2026-11-29, dilation 2, bench_validate's
synthetic row and bench_compete's eight transfers on one tier-3 path, at 1514- and
414-byte frames): none, in the input backlog or the datapath's sockets, with the
datapath's main thread 91-95% busy; every loss was an emulated queue's. What the
sockets hold is packets waiting for the datapath's thread, a delay no wire has: on the
synthetic row the fullest socket held 20-25% of its buffer at 1514 B and 22-65% at
414 B (all sockets together, p99 16-21 KB and 95-343 KB); past half a buffer the run is
warned, as drops are then one burst away.

The kernel reports bytes, not a wait. Little's law turns them into one: the mean wait is
the mean held over the rate the datapath's ports took bytes in. What is held counts each
packet at its buffer's true size, more than its wire bytes, so the figure is an upper
bound (by that ratio: typically about 1.5 at 1514-byte frames, more at small ones). The tail is
given as the p99 held drained at the mean rate of the intervals that took anything in.
No limit in time is set: these are figures for the reader; docs/validation.md sets them
beside the round trips TCP saw (measured: far shorter than the emulated queues' delay,
and not what lengthens those round trips).
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean

MAX_MACHINE_DROPS = 0
FULL_WARN = 0.5


def _quantile(xs: Sequence[int], q: float) -> int | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def ingress_wait(held: Sequence[int], intake: Sequence[int], at: Sequence[float]) -> dict:
    """Upper bounds on how long packets waited in the datapath's receive buffers, in wall
    ms: the mean by Little's law (mean held / mean intake rate) and the p99 held drained
    at the mean rate of the intervals that took bytes in. `intake`: the ports' received
    bytes (a counter) at each sample, taken at `at` (seconds). None where nothing came in."""
    steps = [(b - a, t1 - t0) for a, b, t0, t1 in zip(intake, intake[1:], at, at[1:],
                                                      strict=False) if t1 > t0]
    span = sum(dt for _, dt in steps)
    busy = [(got, dt) for got, dt in steps if got > 0]
    if not busy:
        return {"intake_mb_per_s": None, "wait_mean_ms": None, "wait_p99_ms": None}
    rate = sum(got for got, _ in steps) / span
    busy_rate = sum(got for got, _ in busy) / sum(dt for _, dt in busy)
    return {"intake_mb_per_s": round(rate / 1e6, 3),
            "wait_mean_ms": round(1e3 * fmean(held) / rate, 6),
            "wait_p99_ms": round(1e3 * _quantile(held, 0.99) / busy_rate, 6)}


def ingress_judgement(drops: dict | None, held: Sequence[int], fullest: float,
                      error: str | None = None, intake: Sequence[int] = (),
                      at: Sequence[float] = ()) -> dict:
    """`drops`: IngressReader.stop()'s counts (None: not read); `held`: the bytes the
    datapath's receive buffers held at each sample; `fullest`: the largest share of its
    buffer one socket held; `intake`, `at`: see ingress_wait. -> reasons, warnings and
    the fidelity.json figures."""
    reasons, warnings = [], []
    if drops is not None:
        lost = drops["backlog_drops"] + drops["socket_drops"]
        if lost > MAX_MACHINE_DROPS:
            reasons.append(
                f"the machine dropped {lost} packets before the emulated switches queued "
                f"them ({drops['backlog_drops']} in the kernel's input backlog, counted "
                f"machine-wide; {drops['socket_drops']} in the datapath's receive buffers): "
                "losses the modelled fabric does not have")
    if fullest >= FULL_WARN:
        warnings.append(f"a datapath receive buffer held {fullest:.0%} of its size: packets "
                        "waited for the datapath's thread before any emulated queue (a full "
                        "one drops them)")
    doc = {**(drops or {}), "held_samples": len(held),
           "held_p50_bytes": _quantile(held, 0.5), "held_p99_bytes": _quantile(held, 0.99),
           "held_max_bytes": max(held, default=None), "fullest_share": round(fullest, 4),
           **ingress_wait(held, intake, at), "error": error}
    return {"reasons": reasons, "warnings": warnings, "figures": doc,
            "advice": ["the machine lost packets before the fabric: raise "
                       "emulation.time_dilation or lower emulation.scale (fewer packets per "
                       "second)"] if reasons else []}


def machine_drops(figures: dict | None) -> int | None:
    """Packets lost before the fabric's queues (the kernel's input backlog and the
    datapath's receive buffers), from fidelity.json's `ingress`; None where unread."""
    if not figures or figures.get("backlog_drops") is None:
        return None
    return figures["backlog_drops"] + figures["socket_drops"]
