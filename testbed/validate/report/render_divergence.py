"""The report's section on scheduling divergence: the flow model free and made to place
every request where the packets did (validate/judging/divergence.py)."""

from __future__ import annotations

from testbed.model.extensions.plugins import display_name


def _share(k: int, n: int) -> str:
    return f"{100 * k / n:.0f}%" if n else "-"


def _err(iv: dict) -> str:
    p = iv.get("point")
    if p is None or p != p:
        return "-"
    return f"{100 * p:+.1f}% [{100 * iv['low']:+.1f}, {100 * iv['high']:+.1f}]"


def _abs(x) -> str:
    return "-" if x is None or x != x else f"{100 * x:.1f}%"


def divergence_lines(doc: dict) -> list[str]:
    d = doc.get("decisions")
    if not d:
        return []
    lines = ["## Scheduling divergence: the packets' placements forced", "",
             "The flow model's own run places each request on its own predicted times, so "
             "the two engines soon serve different runs. Forced, it places every request on "
             "the prefill and decode instance the packets chose (where that instance has room "
             "then): the gap left is the network and serving model; the share it closed was "
             "scheduling divergence. Mean TTFT error (flow - packets), TCP model, faithful "
             "runs.", "",
             "| point | scheduler | placed as on packets, free: prefill / decode / both | "
             "forced: both | mean TTFT error, free | forced | gap closed |",
             "|---|---|---|---|---|---|---|"]
    for point, by in d["ttft"].items():
        for sched, g in by.items():
            free = d["free"].get(point, {}).get(sched, {})
            forced = d["forced"].get(point, {}).get(sched, {})
            n = free.get("n", 0)
            closed = "-" if g["closed"] is None else f"{100 * g['closed']:.0f}%"
            lines.append(
                f"| {point} | {display_name(sched)} | {_share(free.get('prefill', 0), n)} / "
                f"{_share(free.get('decode', 0), n)} / {_share(free.get('both', 0), n)} | "
                f"{_share(forced.get('both', 0), forced.get('n', 0))} | {_err(g['free'])} | "
                f"{_err(g['forced'])} | {closed} |")
    free_w = doc["whole_transfers"].get("engines_tcp", {})
    forced_w = d["engines"]
    ranks = "; ".join(f"{point} {r['same']}/{r['seeds']}"
                      for point, r in d["seed_rankings"].items()) or "-"
    lines += ["", f"Whole transfers, both engines: median / p90 abs error "
              f"{_abs(free_w.get('median_abs_error'))} / {_abs(free_w.get('p90_abs_error'))} "
              f"free, {_abs(forced_w.get('median_abs_error'))} / "
              f"{_abs(forced_w.get('p90_abs_error'))} forced. Same ranking by mean TTFT, "
              f"forced: {ranks} seed(s).", ""]
    return lines + _overlap_lines(d.get("overlap") or {})


def _overlap_lines(by_point: dict) -> list[str]:
    """Transfers in flight at each transfer's start: what eq. 4 counts and what it does
    not (validate/judging/divergence.py, overlap)."""
    rows = [(point, sched, run, o) for point, by in by_point.items()
            for sched, runs in by.items() for run, o in runs.items() if o.get("n")]
    if not rows:
        return []
    lines = ["What the transfers met, one run each (the first seed): transfers in flight "
             "when each measured one started, from its own prefill on its tier (eq. 4's n, "
             "all a network-aware scheduler counts), from the other prefills, and into its "
             "decode instance; and the transfers' time over the time the scheduler "
             "predicted. Where the free run's overlap and that ratio grow past the packets', "
             "its decisions drifted through what eq. 4 does not see.", "",
             "| point | scheduler | run | transfers | own prefill, same tier | other prefills "
             "| same decode | time / predicted |", "|---|---|---|---|---|---|---|---|"]
    for point, sched, run, o in rows:
        ratio = o.get("over_predicted")
        lines.append(f"| {point} | {display_name(sched)} | {run} | {o['n']} | {o['own']:.2f} "
                     f"| {o['other']:.2f} | {o['into']:.2f} | "
                     f"{'-' if ratio is None else f'{ratio:.2f}'} |")
    return lines + [""]
