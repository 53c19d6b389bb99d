"""report.md of a validation: what agreed, by how much, and which rows to distrust."""

from __future__ import annotations

from pathlib import Path

from testbed.model.schedulers import SCHEDULERS
from testbed.validate.pipeline import PAPER_TTFT_OVERESTIMATE

SLICES = {
    "replay_uncalibrated": "replay, uncalibrated",
    "replay_calibrated": "replay, calibrated",
    "engines_uncalibrated": "both engines, uncalibrated",
    "engines_calibrated": "both engines, calibrated",
}


def _pct(x) -> str:
    return "-" if x is None or x != x else f"{100 * x:+.1f}%"


def _abs(x) -> str:
    return "-" if x is None or x != x else f"{100 * x:.1f}%"


def _ms(x) -> str:
    return "-" if x is None or x != x else f"{x:.0f}"


def _verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "**not met**")


def render_validation(doc: dict, plots: list[Path], folder: Path) -> str:
    t = doc["targets"]
    cal = doc["calibration"]
    lines = [
        f"# Validation: {doc['scenario']}, packets vs flow model", "",
        "Errors are (flow model - packets) / packets: positive means the flow model is "
        "slower. *Replay* feeds the emulation's own transfers (start, size, endpoints, path) "
        "to the flow model: network-model error alone. *Both engines* lets each engine make "
        "its own scheduling decisions from the same workload and seed.", "",
        "## Summary", "",
        "| figure | measured | target |", "|---|---|---|",
        f"| median abs per-transfer error, replay, calibrated | "
        f"{_abs(t['replay_median_abs_transfer_error'])} | <= {_abs(t['transfer_target'])}: "
        f"{_verdict(_le(t['replay_median_abs_transfer_error'], t['transfer_target']))} |",
        f"| median abs per-transfer error, both engines, calibrated | "
        f"{_abs(t['engines_median_abs_transfer_error'])} | (scheduling divergence included) |",
        f"| worst mean-TTFT difference per scheduler, calibrated | "
        f"{_abs(t['worst_mean_ttft_error'])} | <= {_abs(t['ttft_target'])}: "
        f"{_verdict(_le(t['worst_mean_ttft_error'], t['ttft_target']))} |",
        f"| same scheduler ranking (mean TTFT) | {'yes' if t['same_ranking'] else 'no'} | yes: "
        f"{_verdict(t['same_ranking'])} |",
        f"| NetKV paper, for reference | flow model overestimates mean TTFT by "
        f"{100 * PAPER_TTFT_OVERESTIMATE[0]:.0f}-{100 * PAPER_TTFT_OVERESTIMATE[1]:.0f}% | |",
        "",
    ]
    unfaithful = [f"{p}/{s}" for p, by in doc["fidelity"].items() for s, v in by.items()
                  if v != "faithful"]
    if unfaithful:
        lines += [f"**Unfaithful emulation rows** (the machine could not keep up; treat their "
                  f"figures as suspect, marked † below): {', '.join(unfaithful)}", ""]
    else:
        lines += ["Every emulated run was **faithful** (saturated links at >= 95% of their "
                  "rate, CPU headroom kept).", ""]
    lines += ["## Calibration", "",
              "| tier | pair | achieved / configured rate | fixed cost per transfer | r2 |",
              "|---|---|---|---|---|"]
    for tier, c in cal["tiers"].items():
        lines.append(f"| {tier} | {' -> '.join(c['pair'])} | {100 * c['factor']:.1f}% | "
                     f"{1e3 * c['overhead_s']:.0f} ms | {c['r2']:.3f} |")
    lines += ["", f"Flow-model capacity factors used: `{cal['capacity_factor']}`", "",
              "## Per-transfer completion time", "",
              "| comparison | slice | n | median abs error | p90 abs error | mean error (bias) |",
              "|---|---|---|---|---|---|"]
    for key, label in SLICES.items():
        s = doc["transfers"][key]
        groups = [("all", s)] + [(f"tier {k}", v) for k, v in s["by_tier"].items()] + \
            list(s["by_size"].items())
        for name, g in groups:
            lines.append(f"| {label} | {name} | {g['n']} | {_abs(g['median_abs_error'])} | "
                         f"{_abs(g['p90_abs_error'])} | {_pct(g['mean_error'])} |")
    for phase in ("uncalibrated", "calibrated"):
        for point, data in doc[phase].items():
            lines += ["", f"## TTFT and transfer time per scheduler: {point}, flow model "
                      f"{phase}", "",
                      "| scheduler | TTFT mean packets / flow (ms) | error | P50 packets / flow | "
                      "P99 packets / flow | transfer mean packets / flow (ms) | error |",
                      "|---|---|---|---|---|---|---|"]
            for m in data["metrics"]:
                mark = " †" if doc["fidelity"].get(point, {}).get(m["scheduler"]) != "faithful" \
                    else ""
                lines.append(
                    f"| {SCHEDULERS.get(m['scheduler'], m['scheduler'])}{mark} | "
                    f"{_ms(m['ttft_mean_ms_reference'])} / {_ms(m['ttft_mean_ms_model'])} | "
                    f"{_pct(m['ttft_mean_ms_error'])} | {_ms(m['ttft_p50_ms_reference'])} / "
                    f"{_ms(m['ttft_p50_ms_model'])} | {_ms(m['ttft_p99_ms_reference'])} / "
                    f"{_ms(m['ttft_p99_ms_model'])} | {_ms(m['transfer_mean_ms_reference'])} / "
                    f"{_ms(m['transfer_mean_ms_model'])} | {_pct(m['transfer_mean_ms_error'])} |")
            r = data["ranking"]
            names = [SCHEDULERS.get(k, k) for k in r["reference"]]
            model = [SCHEDULERS.get(k, k) for k in r["model"]]
            lines += ["", f"Ranking by mean TTFT: packets {' < '.join(names)}; flow "
                      f"{' < '.join(model)}: "
                      f"{'same order' if r['same_order'] else '**different order**'} "
                      f"(Kendall tau {r['kendall_tau']:.2f})."]
    lines += ["", "## Tier distribution of transfers (T0:T1:T2:T3, %)", "",
              "| point | scheduler | packets | flow model (calibrated) |", "|---|---|---|---|"]
    for point, by in doc["tiers"].items():
        for sched, d in by.items():
            lines.append(f"| {point} | {SCHEDULERS.get(sched, sched)} | {_tiers(d['packets'])} | "
                         f"{_tiers(d['flow'])} |")
    lines += ["", "## Plots", ""]
    lines += [f"![{p.stem}]({p.relative_to(folder)})" for p in plots]
    lines += ["", "## Run folders", ""]
    lines += [f"- {k}: `{v}`" for k, v in doc["folders"].items()]
    return "\n".join(lines) + "\n"


def _le(x, bound) -> bool | None:
    return None if x is None or x != x else x <= bound


def _tiers(share: dict) -> str:
    return ":".join(f"{100 * share.get(str(t), 0.0):.0f}" for t in range(4))
