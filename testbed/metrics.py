"""The paper's metrics from run records; pure, shared by both engines.

Only requests that arrived in the measurement window count (warm-up excluded). A
rejected or failed request counts as an SLO miss and has no TTFT.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence

from testbed.lifecycle import SERVED_STATES


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]; nan for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def run_summary(requests: Sequence[dict], links: Sequence[dict], workload,
                decision_us: Sequence[float], counters: dict) -> dict:
    """summary.json of one run, from either engine: the paper's metrics over the measured
    window, the decision latency, the offered load and the engine's counters."""
    summary = summarize(requests, links, workload.slo_s, workload.measure_s)
    us = sorted(decision_us)
    summary["decision_us_median"] = us[len(us) // 2] if us else math.nan
    summary["offered_rps"] = workload.rate_rps
    summary["capacity_rps"] = workload.capacity_rps
    summary.update(counters)
    return summary


def summarize(
    requests: Sequence[dict], links: Sequence[dict], slo_s: float, measure_s: float
) -> dict:
    measured = [r for r in requests if r["measured"]]
    done = [r for r in measured if r["state"] in SERVED_STATES]
    affected = [r for r in done if r.get("recovery")]
    ttft = [r["ttft"] for r in done]
    tbt = [r["tbt"] for r in done if r["tbt"] is not None]
    xfer = [r["transfer_end"] - r["transfer_start"] for r in measured
            if r["transfer_end"] is not None and r["transfer_start"] is not None]
    # MFS's earliness: how long before its TTFT deadline each KV transfer completed
    early = [r["arrival"] + (r.get("slo_s") or slo_s) - r["transfer_end"] for r in measured
             if r["transfer_end"] is not None]
    met = [r for r in done if r["ttft"] <= (r.get("slo_s") or slo_s)]  # per-request SLOs
    tiers = Counter(r["tier"] for r in measured if r["tier"] is not None)
    n_tier = sum(tiers.values())
    if hasattr(links, "tier_samples"):  # records.LinkSamples: columns, not rows
        util = links.tier_samples()
    else:
        util = {}
        for row in links:
            if row["measured"]:
                util.setdefault(int(row["tier"]), []).append(row["kv_util"] + row["bg_util"])
    return {
        "requests": len(measured),
        "completed": len(done),
        "rejected": sum(r["state"] == "rejected" for r in measured),
        "failed": sum(r["state"] == "failed" for r in measured),
        "migrated": sum(r["state"] == "migrated" for r in measured),
        "recomputed": sum(r["state"] == "recomputed" for r in measured),
        "aborted": sum(r["state"] == "aborted" for r in measured),
        "affected_ttft_mean_ms": 1e3 * _mean([r["ttft"] for r in affected]),
        "ttft_mean_ms": 1e3 * _mean(ttft),
        "ttft_p50_ms": 1e3 * percentile(ttft, 50),
        "ttft_p95_ms": 1e3 * percentile(ttft, 95),
        "ttft_p99_ms": 1e3 * percentile(ttft, 99),
        "tbt_mean_ms": 1e3 * _mean(tbt),
        "tbt_p95_ms": 1e3 * percentile(tbt, 95),
        "slo_attainment": len(met) / len(measured) if measured else math.nan,
        "goodput_rps": len(met) / measure_s,
        "throughput_rps": len(done) / measure_s,
        "transfer_mean_ms": 1e3 * _mean(xfer),
        "p2d_earliness_mean_ms": 1e3 * _mean(early),
        "tier_share": {str(t): tiers[t] / n_tier for t in sorted(tiers)} if n_tier else {},
        "tier_utilisation": {str(t): _mean(v) for t, v in sorted(util.items())},
    }


def aggregate(summaries: Sequence[dict]) -> dict:
    """Mean and sample std over seeds of every numeric metric (tier maps averaged)."""
    out: dict = {"seeds": len(summaries)}
    if not summaries:
        return out
    for key, value in summaries[0].items():
        if isinstance(value, str) or value is None:
            continue  # labels (e.g. a fidelity verdict) are not averaged
        if isinstance(value, dict):
            keys = sorted({k for s in summaries for k in s[key]})
            out[key] = {k: _mean([s[key].get(k, 0.0) for s in summaries]) for k in keys}
        else:
            vals = [float(s[key]) for s in summaries
                    if s.get(key) is not None and not math.isnan(float(s[key]))]
            out[key] = _mean(vals)
            out[key + "_std"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return out


def tcp_stalls(transfers: list[dict]) -> dict:
    """A run's transfers (one row per shard, counters its own): how many resent segments, how many
    had a retransmission timeout, and the modelled seconds spent recovering from them; the
    median round trip when a shard was sent, and its median excess over the least its
    connection saw (None where not read)."""
    def n(row: dict, key: str) -> float:
        value = row.get(key)
        return float(value) if value not in (None, "") else 0.0

    known = [t for t in transfers if t.get("retrans_segs") not in (None, "")]
    timed = [t for t in known if t.get("rtt_s") not in (None, "")]
    return {"transfers": len(known),
            "resent": sum(n(t, "retrans_segs") > 0 for t in known),
            "timed_out": sum(n(t, "timeouts") > 0 for t in known),
            "timeout_s": sum(n(t, "timeout_s") for t in known),
            "timeouts_known": any(t.get("timeouts") not in (None, "") for t in known),
            "rtt_p50_s": statistics.median([n(t, "rtt_s") for t in timed]) if timed else None,
            "rtt_over_least_p50_s": statistics.median([n(t, "rtt_s") - n(t, "min_rtt_s") for t in timed])
            if timed else None}


def describe_stalls(s: dict) -> str:
    if not s["transfers"]:
        return "no TCP_INFO"
    text = f"{s['resent']} of {s['transfers']} transfers resent segments"
    if s["timeouts_known"]:
        text += (f", {s['timed_out']} had a retransmission timeout "
                 f"({s['timeout_s']:.2f} s modelled in recovery)")
    if s.get("rtt_p50_s") is not None:
        text += (f"; round trip when a shard was sent: median {1e3 * s['rtt_p50_s']:.1f} ms "
                 f"modelled, {1e3 * s['rtt_over_least_p50_s']:.1f} ms over its connection's "
                 "least")
    return text
