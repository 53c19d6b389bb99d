"""Did the machine drop or hold packets before the emulated fabric queued them? The
judgement of what testbed.datapath.ingress read during a run.

A drop there is a loss the modelled fabric does not have: a retransmission, or a
timeout, that neither the switch's queue nor the flow model explains. So any drop fails
the run. Measured on the 2-core machine (2026-11-29, dilation 2, bench_validate's
synthetic row and bench_compete's eight transfers on one tier-3 path, at 1514- and
414-byte frames): none, in the input backlog or the datapath's sockets, with the
datapath's main thread 91-95% busy; every loss was an emulated queue's. What the
sockets hold is packets waiting for the datapath's thread, a delay no wire has: on the
synthetic row the fullest socket held 20-25% of its buffer at 1514 B and 22-65% at
414 B (all sockets together, p99 16-21 KB and 95-343 KB); past half a buffer the run is
warned, as drops are then one burst away. The kernel reports bytes, not a wait, so no
limit in time is set.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_MACHINE_DROPS = 0
FULL_WARN = 0.5


def _quantile(xs: Sequence[int], q: float) -> int | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def ingress_judgement(drops: dict | None, held: Sequence[int], fullest: float,
                      error: str | None = None) -> dict:
    """`drops`: IngressReader.stop()'s counts (None: not read); `held`: the bytes the
    datapath's receive buffers held at each sample; `fullest`: the largest share of its
    buffer one socket held. -> reasons, warnings and the fidelity.json figures."""
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
           "error": error}
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
