"""Option types the commands share (finite numbers, fractions, durations) and where a
packet-level run's seeds go: --fabrics (side by side here), --dask (servers)."""

from __future__ import annotations

import math

import click


class Number(click.ParamType):
    """A finite number within bounds (click's FloatRange lets nan and inf through)."""

    def __init__(self, lo: float, hi: float, integer: bool = False, unit: str = ""):
        self.lo, self.hi, self.integer, self.unit = lo, hi, integer, unit
        self.name = "integer" if integer else "number"

    def convert(self, value, param, ctx):
        if isinstance(value, int | float) and not isinstance(value, bool) \
                and self.lo <= value <= self.hi:
            return value
        text = str(value).strip()
        try:
            x = int(text) if self.integer else float(text)
        except ValueError:
            self.fail(f"{value!r} is not {'an integer' if self.integer else 'a number'}",
                      param, ctx)
        if not math.isfinite(x) or not self.lo <= x <= self.hi:
            self.fail(f"{value!r}: give {'an integer' if self.integer else 'a number'} from "
                      f"{self.lo:g} to {self.hi:g}{self.unit}", param, ctx)
        return x


MAX_DURATION_S = 30 * 86400.0
MAX_REPEATS = 100  # each a whole packet run of the first seed


class Fraction(click.ParamType):
    """4% or 0.04: a fraction in (0, 1)."""

    name = "fraction"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        text = str(value).strip()
        try:
            x = float(text.rstrip("%")) / (100.0 if text.endswith("%") else 1.0)
        except ValueError:
            self.fail(f"{value!r} is not a fraction (give 4% or 0.04)", param, ctx)
        if not 0 < x < 1:
            self.fail(f"{value!r} must lie between 0 and 1 (4% or 0.04)", param, ctx)
        return x


class Duration(click.ParamType):
    """540, 540s, 9m, 1.5h: seconds."""

    name = "duration"
    UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        text = str(value).strip().lower()
        unit = self.UNITS.get(text[-1:], None)
        try:
            x = float(text[:-1] if unit else text) * (unit or 1.0)
        except ValueError:
            self.fail(f"{value!r} is not a duration (give 540, 540s, 9m or 1.5h)", param, ctx)
        if not 0 < x <= MAX_DURATION_S:  # NaN too
            self.fail(f"{value!r} must be positive and at most 30 days", param, ctx)
        return x


class FabricCount(click.ParamType):
    """A number of fabrics side by side, or auto."""

    name = "K|auto"

    def convert(self, value, param, ctx):
        if isinstance(value, int) or value == "auto":
            return value
        text = str(value).strip().lower()
        if text == "auto":
            return "auto"
        try:
            k = int(text)
        except ValueError:
            self.fail(f"{value!r} is neither a number of fabrics nor 'auto'", param, ctx)
        if not 1 <= k <= 64:
            self.fail(f"{value!r}: give 1 to 64 fabrics, or auto", param, ctx)
        return k


def fabrics_option(fn):
    """--fabrics K|auto: a point's seeds on K fabrics side by side on this machine."""
    return click.option(
        "--fabrics", "fabrics", type=FabricCount(), default="auto", show_default=True,
        help="Run a sweep point's seeds on K fabrics side by side, each in its own network "
        "namespace with its own OVS daemon(s), controller and ports (userspace datapath). "
        "auto: one until a fabric alone on this machine was measured (validate, emulate), then as "
        "many as the cores carry with a quarter spare, each with the OVS daemons its "
        "forwarding needs (half a core each), never more than the seeds, 1 on the kernel "
        "datapath or 2 cores; a round with a run flagged CPU- or datapath-bound costs a "
        "fabric.")(fn)


def dask_option(fn):
    """--dask ADDRESS: a point's seeds on the servers of a Dask scheduler."""
    return click.option(
        "--dask", "dask_address", default=None, metavar="ADDRESS",
        help="Run each seed on a server of this Dask scheduler (tcp://HOST:8786): every "
        "worker started as root with `dask worker ADDRESS --nthreads 1 --resources "
        "fabric=1` is a server that builds a fabric of its own, runs all the schedulers of "
        "one seed at a time and sends its run folders back; a server lost mid-run has its "
        "seed re-run on another. The servers need this project (same version), not the "
        "trace: it travels with the work.")(fn)
