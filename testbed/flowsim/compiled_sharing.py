"""The fluid network with its max-min sharing compiled (native/maxmin.cc): the same
incremental re-sharing and progressive filling as sharing.py and fill.py, which stay as
the reference the tests hold it to, on integer-indexed columns.

The compiled side keeps what re-sharing reads (each flow's links, weight, effective cap,
level and rate; each link's KV capacity, rate and flows); Python keeps everything else and
tells it what changed: a flow's path (_set_path), its weight, cap or level before each
re-sharing that names it (`changed`, or every flow on the touched links when none is
named), all of them before a whole re-sharing. After each re-sharing the flows whose rates
moved get _set_rate; the links' KV rates and byte counters are the compiled side's.
"""

from __future__ import annotations

import ctypes
import math
import os
import weakref
from array import array
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from testbed import native
from testbed.flowsim.links import Flow, Hop
from testbed.flowsim.network import FluidNetwork

SOURCE = Path(__file__).with_name("native") / "maxmin.cc"
_p, _i, _ll, _d, _long = (ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_double,
                          ctypes.c_long)
# inputs are addresses of array.array buffers (c_void_p: no ctypes cast per call)
SIGNATURES = (
    ("mm_new", _p, (_i,)), ("mm_free", None, (_p,)),
    ("mm_set_all_links", None, (_p, _p, _p, _p, _d)), ("mm_set_links", None, (_p, _ll, _p, _i)),
    ("mm_set_flow", None, (_p, _ll, _d, _d, _i)),
    ("mm_set_flows", None, (_p, _p, _p, _p, _p, _long)), ("mm_forget_shares", None, (_p,)),
    ("mm_settle_all", None, (_p, _d, _p, _p)), ("mm_kv_rates", None, (_p, _p)),
    ("mm_busy", _i, (_p, _p, _i)),
    ("mm_recompute", _long, (_p, _d, _p, _long, _p, _long, _p, _long, _i, _long, _d)),
    ("mm_flow_ids", ctypes.POINTER(_ll), (_p,)),
    ("mm_flow_rates", ctypes.POINTER(_d), (_p,)))


def library() -> ctypes.CDLL:
    return native.library(SOURCE, SIGNATURES)


def available() -> bool:
    """Whether the compiled sharing loads here (built if needed); NETKV_FLOWSIM_NATIVE=0
    turns it off (the Python reference shares instead)."""
    if os.environ.get("NETKV_FLOWSIM_NATIVE", "1") == "0":
        return False
    try:
        library()
    except (native.NativeUnavailable, OSError) as exc:
        native.warn_once(f"the flow simulator shares bandwidth in Python (slower; rates "
                         f"equal to a few ulps): {exc}")
        return False
    return True


def _at(data: array) -> int | None:
    """The address of an array's items (None when empty); the caller keeps `data` alive."""
    return data.buffer_info()[0] if data else None


class CompiledSharing:
    """FluidNetwork's rate allocation on the compiled core (mixed in before it)."""

    def _core_init(self) -> None:
        self._lib = lib = library()
        self._core = lib.mm_new(len(self.link_list))
        weakref.finalize(self, lib.mm_free, self._core)
        self._push_links()

    def _push_links(self) -> None:
        """Every link's KV capacity and background, from now on."""
        links = self.link_list
        caps = array("d", [lk.kv_capacity for lk in links])
        fulls = array("d", [lk.kv_full for lk in links])
        bg = array("d", [lk.background * lk.capacity for lk in links])
        self._lib.mm_set_all_links(self._core, _at(caps), _at(fulls), _at(bg), self.last_update)

    def _sync(self, flows: Iterable[Flow]) -> None:
        """The compiled side learns these flows' weights, effective caps and levels."""
        fids, weights, caps, levels = array("q"), array("d"), array("d"), array("i")
        for flow in flows:
            cap = flow.effective_cap()
            fids.append(flow.flow_id)
            weights.append(flow.weight)
            caps.append(math.inf if cap is None else cap)
            levels.append(flow.level)
        if fids:
            self._lib.mm_set_flows(self._core, _at(fids), _at(weights), _at(caps), _at(levels),
                                   len(fids))

    # -- what FluidNetwork changes ------------------------------------------------------
    def _set_path(self, flow: Flow, path: list[Hop]) -> None:
        super()._set_path(flow, path)
        links = array("i", flow.links)
        self._lib.mm_set_links(self._core, flow.flow_id, _at(links), len(links))

    def _rerank(self, group: object) -> set[int]:
        moved = super()._rerank(group)
        self._sync(self._groups.get(group, ()))
        return moved

    def _seniority(self, now: float) -> float:
        epoch = self._epoch
        weight = super()._seniority(now)
        if epoch is not None and self._epoch != epoch:  # every weight was scaled
            self._sync(self.flows.values())
            self._lib.mm_forget_shares(self._core)
        return weight

    # -- sharing ------------------------------------------------------------------------
    def recompute(self, touched: Iterable[Hop] | None = None,
                  changed: Iterable[Flow] | None = None) -> None:
        """sharing.MaxMinSharing.recompute, on the compiled core."""
        if touched is None:
            self._recompute_links(None)
            return
        hs = {self.links[hop].index for hop in touched if hop in self.links}
        if changed is None:  # any flow on these links may have changed
            self._sync(self.flows[fid] for h in hs for fid in self.link_list[h].flows)
        self._recompute_links(hs, changed=changed)

    def _recompute_links(self, touched: set[int] | None, gone: list[Flow] = (),
                         changed: Iterable[Flow] | None = None) -> None:
        lib, core = self._lib, self._core
        if touched is None:
            self._push_links()
            self._sync(self.flows.values())
            self._leveled = sum(1 for f in self.flows.values() if f.level)
            n = lib.mm_recompute(core, self.last_update, None, -1, None, 0, None, -1, 0, 0, 0.0)
        else:
            hs = array("i", touched)
            out = array("q", [f.flow_id for f in gone])
            if changed is None:
                ch, n_ch = None, -1
            else:
                changed = [f for f in changed if f.flow_id in self.flows]
                self._sync(changed)
                ch = array("q", [f.flow_id for f in changed])
                n_ch = len(ch)
            n = lib.mm_recompute(core, self.last_update, _at(hs), len(hs), _at(out), len(out),
                                 _at(ch) if ch else None, n_ch,
                                 int(self.incremental and not self._leveled),
                                 self.INCREMENTAL_MAX_FLOWS, self.INCREMENTAL_MAX_SHARE)
        self._apply(n)

    def _apply(self, n: int) -> None:
        """The compiled re-sharing's new rates."""
        if n:
            lib, core = self._lib, self._core
            flows, set_rate = self.flows, self._set_rate
            for fid, rate in zip(lib.mm_flow_ids(core)[:n], lib.mm_flow_rates(core)[:n],
                                 strict=True):
                set_rate(flows[fid], rate)

    # -- what the links carry, kept on the compiled side ---------------------------------
    def _settle_links(self, now: float) -> None:
        n = len(self.link_list)
        self._kv_bytes, self._bg_bytes = array("d", bytes(8 * n)), array("d", bytes(8 * n))
        self._lib.mm_settle_all(self._core, now, _at(self._kv_bytes), _at(self._bg_bytes))

    def link_bytes(self) -> tuple[np.ndarray, np.ndarray]:
        return np.frombuffer(self._kv_bytes, float), np.frombuffer(self._bg_bytes, float)

    def kv_rates(self) -> list[float]:
        out = array("d", bytes(8 * len(self.link_list)))
        self._lib.mm_kv_rates(self._core, _at(out))
        return out.tolist()

    def _path_busy(self, flow: Flow) -> bool:
        links = array("i", flow.links)
        return bool(self._lib.mm_busy(self._core, _at(links), len(links)))


class NativeFluidNetwork(CompiledSharing, FluidNetwork):
    """FluidNetwork, its sharing compiled. Its links' KV rates and byte counters live on
    the compiled side (kv_rates(), link_bytes() after advance()); its LinkState objects
    hold what Python sets: capacity, tier, background, down."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._core_init()
