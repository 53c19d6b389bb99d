"""Comparison math between a reference run (packets) and a model run (flows): pure.

Errors are relative to the reference: (model - reference) / reference, so a positive
error means the flow model is slower (overestimates) than the packets. Byte counts are in
the modelled cluster's units in both engines, so size buckets mean the same thing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from testbed.lifecycle import SERVED_STATES
from testbed.metrics import percentile

SIZE_BUCKETS = ((0, 2**30, "< 1 GiB"), (2**30, 4 * 2**30, "1-4 GiB"),
                (4 * 2**30, 16 * 2**30, "4-16 GiB"), (16 * 2**30, math.inf, ">= 16 GiB"))


def relative_error(model: float, reference: float) -> float:
    if reference <= 0:
        raise ValueError(f"reference must be positive, got {reference}")
    return (model - reference) / reference


@dataclass(frozen=True)
class TransferPair:
    request: str
    shard: int
    tier: int
    size_bytes: float
    reference_s: float
    model_s: float
    timed_out: bool | None = None  # the packets' connection had an RTO (None: not known)

    @property
    def error(self) -> float:
        return relative_error(self.model_s, self.reference_s)


def _duration(row: dict) -> float:
    return float(row["end"]) - float(row["start"])


def match_transfers(reference: Sequence[dict], model: Sequence[dict]) -> tuple[
        list[TransferPair], list[tuple[str, int]]]:
    """Pair transfers.csv rows by (request, shard); also return the unmatched keys."""
    by_key = {(str(r["request"]), int(r["shard"])): r for r in model}
    pairs, missing = [], []
    for ref in reference:
        key = (str(ref["request"]), int(ref["shard"]))
        other = by_key.get(key)
        if other is None or _duration(ref) <= 0:
            missing.append(key)
            continue
        pairs.append(TransferPair(key[0], key[1], int(ref["tier"]), float(ref["bytes"]),
                                  _duration(ref), _duration(other), _timed_out(ref)))
    return pairs, missing


def _timed_out(row: dict) -> bool | None:
    value = row.get("timeouts")
    return None if value in (None, "") else int(float(value)) > 0


def stall_split(pairs: Sequence[TransferPair]) -> dict:
    """Errors of the transfers whose connection had a retransmission timeout on
    packets, apart from the others': how much of the model's error stalls explain."""
    return {"timed_out": error_stats([p.error for p in pairs if p.timed_out]),
            "clean": error_stats([p.error for p in pairs if p.timed_out is False]),
            "unknown": sum(p.timed_out is None for p in pairs)}


def whole_transfers(rows: Sequence[dict]) -> list[dict]:
    """One row per transfer (all shards of a request's KV move): it starts with its first
    shard and ends with its slowest, which is when the decode side can admit the request.
    Shard -1 marks the whole."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(str(row["request"]), []).append(row)
    out = []
    for request, shards in groups.items():
        if any(r.get("end") in (None, "") for r in shards):
            continue  # a shard that never landed: no whole-transfer time
        out.append({"request": request, "shard": -1, "src": shards[0]["src"],
                    "dst": shards[0]["dst"], "tier": shards[0]["tier"],
                    "bytes": sum(float(r["bytes"]) for r in shards),
                    "start": min(float(r["start"]) for r in shards),
                    "end": max(float(r["end"]) for r in shards)})
    return out


def shard_spread(rows: Sequence[dict]) -> list[float]:
    """Per transfer of two or more shards, slowest / fastest shard duration."""
    groups: dict[str, list[float]] = {}
    for row in rows:
        if row.get("end") not in (None, ""):
            groups.setdefault(str(row["request"]), []).append(_duration(row))
    return [max(d) / min(d) for d in groups.values() if len(d) > 1 and min(d) > 0]


def error_stats(errors: list[float]) -> dict:
    absolute = [abs(e) for e in errors]
    return {
        "n": len(errors),
        "median_abs_error": percentile(absolute, 50),
        "p90_abs_error": percentile(absolute, 90),
        "mean_error": statistics.fmean(errors) if errors else math.nan,
    }


def size_bucket(size_bytes: float) -> str:
    for lo, hi, label in SIZE_BUCKETS:
        if lo <= size_bytes < hi:
            return label
    raise ValueError(f"negative size {size_bytes}")


def error_summary(pairs: Sequence[TransferPair]) -> dict:
    """Overall, per tier and per size bucket: n, median |error|, p90 |error|, mean (bias)."""
    out = error_stats([p.error for p in pairs])
    out["by_tier"] = {str(t): error_stats([p.error for p in pairs if p.tier == t])
                      for t in sorted({p.tier for p in pairs})}
    out["by_size"] = {label: error_stats([p.error for p in pairs if size_bucket(p.size_bytes) == label])
                      for _, _, label in SIZE_BUCKETS
                      if any(size_bucket(p.size_bytes) == label for p in pairs)}
    return out


def paired_ttft(reference: Sequence[dict], model: Sequence[dict]) -> tuple[list[float],
                                                                           list[float]]:
    """TTFTs (s) of the requests measured and served in both runs, in the same order."""
    def served(rows):
        return {str(r["id"]): float(r["ttft"]) for r in rows
                if str(r.get("measured")).lower() in ("true", "1")
                and r.get("ttft") not in (None, "") and r.get("state") in SERVED_STATES}
    ref, mod = served(reference), served(model)
    common = sorted(set(ref) & set(mod))
    return [ref[k] for k in common], [mod[k] for k in common]


def ranking(scores: dict[str, float]) -> list[str]:
    """Schedulers from best (lowest, e.g. mean TTFT) to worst; ties by name."""
    return sorted(scores, key=lambda k: (scores[k], k))


def kendall_tau(a: Sequence[str], b: Sequence[str]) -> float:
    """Rank agreement of two orderings of the same items: 1 same, -1 reversed."""
    if set(a) != set(b):
        raise ValueError("the two rankings must hold the same schedulers")
    n = len(a)
    if n < 2:
        return 1.0
    pos_b = {item: i for i, item in enumerate(b)}
    concordant = discordant = 0
    for i in range(n):
        for j in range(i + 1, n):
            if pos_b[a[i]] < pos_b[a[j]]:
                concordant += 1
            else:
                discordant += 1
    return (concordant - discordant) / (n * (n - 1) / 2)


def metric_comparison(reference: dict[str, dict], model: dict[str, dict],
                      metrics: Sequence[str] = ("ttft_mean_ms", "ttft_p50_ms", "ttft_p99_ms",
                                                "transfer_mean_ms")) -> list[dict]:
    """Per scheduler, each metric in both engines and the model's relative error."""
    rows = []
    for sched in sorted(set(reference) & set(model)):
        row = {"scheduler": sched}
        for m in metrics:
            ref, mod = reference[sched].get(m), model[sched].get(m)
            row[f"{m}_reference"], row[f"{m}_model"] = ref, mod
            ok = ref is not None and mod is not None and ref > 0 and not math.isnan(ref)
            row[f"{m}_error"] = relative_error(mod, ref) if ok else None
        rows.append(row)
    return rows


def ranking_agreement(reference: dict[str, dict], model: dict[str, dict],
                      metric: str = "ttft_mean_ms") -> dict:
    common = set(reference) & set(model)
    ref = ranking({k: reference[k][metric] for k in common})
    mod = ranking({k: model[k][metric] for k in common})
    return {"metric": metric, "reference": ref, "model": mod, "same_order": ref == mod,
            "kendall_tau": kendall_tau(ref, mod)}
