"""PNG plots of a validation (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first

from testbed.model.extensions.plugins import display_name  # noqa: E402
from testbed.validate.judging.model_errors import SIZE_BUCKETS  # noqa: E402
from testbed.validate.judging.targets import GAIN_TOLERANCE  # noqa: E402
from testbed.validate.judging.words import METRIC_NAMES  # noqa: E402
from testbed.validate.report.answer import verdict_interval  # noqa: E402

VERDICT_COLOURS = {"agree": "tab:green", "disagree": "tab:red", "inconclusive": "tab:orange"}


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def transfer_scatter(doc: dict, out: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5), sharex=True, sharey=True)
    for ax, key, title in ((axes[0], "replay_calibrated", "replay (calibrated)"),
                           (axes[1], "engines_calibrated", "both engines (calibrated)")):
        samples = doc["transfer_samples"][key]
        for tier, color in ((1, "tab:green"), (2, "tab:blue"), (3, "tab:red")):
            pts = [(r, m) for r, m, t, _ in samples if t == tier]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=8, alpha=0.6,
                           color=color, label=f"tier {tier}")
        top = max([max(r, m) for r, m, _, _ in samples] or [1.0])
        ax.plot([0, top], [0, top], "k--", lw=0.8, label="equal")
        ax.set_title(f"per-shard completion time: {title}")
        ax.set_xlabel("packets (s)")
        ax.set_ylabel("flow model (s)")
        ax.legend()
    return _save(fig, out / "transfer_scatter.png")


def error_distribution(doc: dict, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, style in (("replay_uncalibrated", "C0--"), ("replay_calibrated", "C0-"),
                       ("engines_uncalibrated", "C1--"), ("engines_calibrated", "C1-")):
        errs = sorted((m - r) / r for r, m, _, _ in doc["transfer_samples"][key] if r > 0)
        if errs:
            ax.plot([100 * e for e in errs], [(i + 1) / len(errs) for i in range(len(errs))],
                    style, label=key.replace("_", ", "))
    ax.axvline(0, color="k", lw=0.6)
    ax.set_xlabel("per-shard error, (flow - packets) / packets (%)")
    ax.set_ylabel("CDF")
    ax.set_title("per-transfer error distribution")
    ax.legend()
    return _save(fig, out / "transfer_error_cdf.png")


def error_slices(doc: dict, out: Path) -> Path:
    s = doc["transfers"]["replay_calibrated"]
    labels = [f"tier {k}" for k in s["by_tier"]] + [b for _, _, b in SIZE_BUCKETS
                                                     if b in s["by_size"]]
    values = [v["median_abs_error"] for v in s["by_tier"].values()] + \
        [s["by_size"][b]["median_abs_error"] for _, _, b in SIZE_BUCKETS if b in s["by_size"]]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(labels, [100 * v for v in values], color="tab:blue")
    ax.axhline(100 * doc["targets"]["transfer_target"], color="tab:red", ls="--", label="target")
    ax.set_ylabel("median |error| (%)")
    ax.set_title("replay (calibrated): error per tier and size bucket")
    ax.legend()
    return _save(fig, out / "transfer_error_slices.png")


def _level(doc: dict) -> str:
    return f"{100 * (doc.get('sequential') or {}).get('level', 0.95):.1f}%"


def _errbar(e: dict, scale: float) -> tuple[float, list[float]]:
    """Bar height and its (below, above) error from an Estimate dict."""
    point = scale * e["point"]
    if e["low"] is None or e["low"] != e["low"]:
        return point, [0.0, 0.0]
    return point, [max(0.0, point - scale * e["low"]), max(0.0, scale * e["high"] - point)]


def ttft_bars(doc: dict, out: Path) -> list[Path]:
    """What the verdict judged: packets vs the flow model with its TCP terms, on the
    requests paired across every run of the point (faithful runs), with the claims'
    intervals as error bars."""
    paths = []
    for point in doc.get("tcp", {}):
        data = doc.get("claims", {}).get(point) or {}
        values = data.get("values") or {}
        if not values:
            paths.append(_ttft_unpaired(doc, point, out))
            continue
        names = list(values["ttft_mean"]["packets"])
        fig, axes = plt.subplots(1, 3, figsize=(13, 4))
        for ax, key, title, scale in ((axes[0], "ttft_mean", "TTFT mean (ms)", 1e3),
                                      (axes[1], "ttft_p99", "TTFT P99 (ms)", 1e3),
                                      (axes[2], "slo", "SLO attainment (%)", 100.0)):
            xs = range(len(names))
            for shift, engine, label in ((-0.2, "packets", "packets"),
                                         (0.2, "flow", "flow (TCP terms)")):
                bars = [_errbar(values[key][engine][s], scale) for s in names]
                ax.bar([x + shift for x in xs], [b[0] for b in bars], 0.4, label=label,
                       yerr=[[b[1][0] for b in bars], [b[1][1] for b in bars]], capsize=4)
            ax.set_xticks(list(xs), [display_name(s) for s in names], rotation=20)
            ax.set_title(title)
        axes[0].legend()
        fig.suptitle(f"{doc['scenario']} {point}: {data['n']} requests paired across "
                     f"schedulers and engines ({_level(doc)} intervals)")
        paths.append(_save(fig, out / f"ttft_{point}.png"))
    return paths


def _ttft_unpaired(doc: dict, point: str, out: Path) -> Path:
    """No faithful seed to pair: every run's own figures (TCP model), without intervals,
    and a title that says so."""
    metrics = doc["tcp"][point]["metrics"]
    names = [display_name(m["scheduler"]) for m in metrics]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in ((axes[0], "ttft_mean_ms", "TTFT mean (ms)"),
                           (axes[1], "ttft_p99_ms", "TTFT P99 (ms)")):
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], [m[f"{key}_reference"] or 0 for m in metrics], 0.4,
               label="packets (every run, faithful or not)")
        ax.bar([x + 0.2 for x in xs], [m[f"{key}_model"] or 0 for m in metrics], 0.4,
               label="flow (TCP terms)")
        ax.set_xticks(list(xs), names, rotation=20)
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{doc['scenario']} {point}: no faithful seed to pair, so no intervals "
                 "and no verdict")
    return _save(fig, out / f"ttft_{point}.png")


def gain_bars(doc: dict, out: Path) -> list[Path]:
    """Each claim's gain on packets, in the flow model and (when judged) in the replay
    of the packets' own transfers, with intervals and both verdicts."""
    paths = []
    for point, data in doc.get("claims", {}).items():
        if not data.get("claims"):
            continue
        metrics = ("ttft_mean", "ttft_p99", "slo")
        fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
        for ax, metric in zip(axes, metrics, strict=True):
            rows = [c for c in data["claims"] if c["metric"] == metric]
            xs = range(len(rows))
            engines = ("packets", "flow") + (("replay",) if rows and rows[0].get("replay")
                                             else ())
            width = 0.8 / len(engines)
            for k, engine in enumerate(engines):
                shift = (k - (len(engines) - 1) / 2) * width
                bars = [_errbar(c[engine], 100.0) for c in rows]
                label = "replay (packets' decisions)" if engine == "replay" else engine
                ax.bar([x + shift for x in xs], [b[0] for b in bars], width, label=label,
                       yerr=[[b[1][0] for b in bars], [b[1][1] for b in bars]], capsize=4)
            ax.axhline(0, color="k", lw=0.6)
            ax.set_xticks(list(xs), [f"{display_name(c['scheduler'])}\nvs "
                                     f"{display_name(c['baseline'])}\n{c['verdict']}"
                                     + (f"\nreplay: {c['network_verdict']}"
                                        if c.get("network_verdict") else "")
                                     for c in rows], fontsize=8)
            unit = "points" if metric == "slo" else "%"
            ax.set_title(f"gain in {metric.replace('_', ' ')} ({unit})")
        axes[0].legend()
        fig.suptitle(f"{doc['scenario']} {point}: gains, packets vs flow model "
                     f"({_level(doc)} intervals)")
        paths.append(_save(fig, out / f"gains_{point}.png"))
    return paths


def tier_bars(doc: dict, out: Path) -> list[Path]:
    paths = []
    for point, by in doc["tiers"].items():
        fig, ax = plt.subplots(figsize=(8, 4))
        labels, bottoms_p, bottoms_f = [], [], []
        scheds = list(by)
        for tier, color in ((1, "tab:green"), (2, "tab:blue"), (3, "tab:red")):
            p = [100 * by[s]["packets"].get(str(tier), 0.0) for s in scheds]
            f = [100 * by[s]["flow"].get(str(tier), 0.0) for s in scheds]
            xs = range(len(scheds))
            ax.bar([x - 0.2 for x in xs], p, 0.4, bottom=bottoms_p or None, color=color,
                   label=f"tier {tier}", edgecolor="k")
            ax.bar([x + 0.2 for x in xs], f, 0.4, bottom=bottoms_f or None, color=color,
                   hatch="//", edgecolor="k")
            bottoms_p = [a + b for a, b in zip(bottoms_p or [0] * len(p), p, strict=True)]
            bottoms_f = [a + b for a, b in zip(bottoms_f or [0] * len(f), f, strict=True)]
        labels = [display_name(s) for s in scheds]
        ax.set_xticks(list(range(len(scheds))), labels)
        ax.set_ylabel("share of transfers (%)")
        ax.set_title(f"tier distribution: packets (left, plain) vs flow (right, hatched) {point}")
        ax.legend()
        paths.append(_save(fig, out / f"tiers_{point}.png"))
    return paths


def calibration_fit(cal: dict, out: Path) -> Path | None:
    """Lone-transfer probes per tier against size: measured, fluid and TCP model."""
    fit = cal.get("tcp")
    if not fit or not fit.get("residuals"):
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for tier, color in ((1, "tab:green"), (2, "tab:blue"), (3, "tab:red")):
        rows = sorted((r["bytes"], r["seconds"], r["tcp_error"]) for r in fit["residuals"]
                      if r["tier"] == tier)
        if not rows:
            continue
        factor = cal["tiers"][str(tier)]
        xs = [b for b, _, _ in rows]
        ax.loglog(xs, [s for _, s, _ in rows], "o", color=color, label=f"tier {tier} packets")
        ax.loglog(xs, [s * (1 + e) for _, s, e in rows], "-", color=color,
                  label=f"tier {tier} TCP model")
        slope = (factor["samples"][-1]["seconds"] - factor["overhead_s"]) / \
            factor["samples"][-1]["bytes"]
        ax.loglog(xs, [b * slope for b in xs], ":", color=color, label=f"tier {tier} fluid")
    ax.set_xlabel("transfer size (modelled bytes)")
    ax.set_ylabel("completion time (modelled s)")
    ax.set_title(f"calibration: serialisation share {fit['serialisation']:.2f}, hop delay "
                 f"{1e6 * fit['hop_delay_s']:.0f} us (wall)")
    ax.legend(fontsize=7)
    return _save(fig, out / "calibration_fit.png")


def verdict_forest(doc: dict, out: Path) -> Path | None:
    """Every claim's difference of gains (flow model - packets) with the interval its
    verdict read, against the +-tolerance band: the picture of an equivalence test (agree:
    the whole interval inside the band; disagree: wholly outside)."""
    rows = [(point, c) for point, by in (doc.get("claims") or {}).items()
            for c in by["claims"]]
    if not rows:
        return None
    several = len({p for p, _ in rows}) > 1
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.42 * len(rows)))
    band = 100 * GAIN_TOLERANCE
    ax.axvspan(-band, band, color="0.9", zorder=0, label=f"+-{band:.0f} points")
    ax.axvline(0, color="k", lw=0.6)
    for y, (_point, c) in enumerate(reversed(rows)):
        e = verdict_interval(c)
        if e["point"] is None or e["point"] != e["point"]:
            continue
        lo = e["low"] if e["low"] == e["low"] and e["low"] is not None else e["point"]
        hi = e["high"] if e["high"] == e["high"] and e["high"] is not None else e["point"]
        ax.errorbar(100 * e["point"], y, xerr=[[100 * (e["point"] - lo)],
                                               [100 * (hi - e["point"])]],
                    fmt="o", capsize=4, color=VERDICT_COLOURS.get(c["verdict"], "k"))
    labels = [f"{point + ': ' if several else ''}{display_name(c['scheduler'])} vs "
              f"{display_name(c['baseline'])}, {METRIC_NAMES[c['metric']]} ({c['verdict']})"
              for point, c in reversed(rows)]
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.set_xlabel("flow model's gain - packets' gain (points)")
    ax.set_title(f"{doc['scenario']}: the claims' verdicts ({_level(doc)} intervals)")
    ax.legend(fontsize=7, loc="best")
    return _save(fig, out / "verdicts.png")


def write_plots(doc: dict, out: Path) -> list[Path]:
    cal = calibration_fit(doc["calibration"], out)
    forest = verdict_forest(doc, out)
    return [*([forest] if forest else []), transfer_scatter(doc, out),
            error_distribution(doc, out), error_slices(doc, out), *ttft_bars(doc, out),
            *gain_bars(doc, out), *tier_bars(doc, out), *([cal] if cal else [])]
