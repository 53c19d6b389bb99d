"""report.md of a validation: what agreed, by how much, and which rows to distrust."""

from __future__ import annotations

from pathlib import Path

from testbed.inputs import read_json
from testbed.metrics import describe_stalls
from testbed.model.extensions.plugins import display_name
from testbed.validate.comparison.summary import reach
from testbed.validate.judging.targets import ENGINES_MEDIAN
from testbed.validate.judging.words import runs_of
from testbed.validate.report import model_table
from testbed.validate.report.answer import answer_lines
from testbed.validate.report.render_claims import claim_lines
from testbed.validate.report.render_divergence import divergence_lines
from testbed.validate.report.render_three_way import three_way_lines

PAPER_TTFT_OVERESTIMATE = (0.09, 0.13)  # NetKV paper: flow estimator vs its packet model

SLICES = {
    "replay_uncalibrated": "replay, uncalibrated",
    "replay_calibrated": "replay, calibrated",
    "replay_tcp": "replay, calibrated + TCP terms",
    "engines_uncalibrated": "both engines, uncalibrated",
    "engines_calibrated": "both engines, calibrated",
    "engines_tcp": "both engines, calibrated + TCP terms",
}


def _pct(x) -> str:
    return "-" if x is None or x != x else f"{100 * x:+.1f}%"


def _abs(x) -> str:
    return "-" if x is None or x != x else f"{100 * x:.1f}%"


def _ms(x) -> str:
    return "-" if x is None or x != x else f"{x:.0f}"


def _verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "**not met**")


def _ecmp_lines(doc: dict) -> list[str]:
    e = doc.get("ecmp")
    if not e:
        return []
    asked = "" if e["scenario"] == e["compared"] else (
        f" (the scenario asks for `{e['scenario']}`, which the packet fabric runs as "
        f"`{e['compared']}`; the flow model is run the same way here)")
    return [f"ECMP compared: `{e['compared']}`{asked}: {e['meaning']}.", ""]


def _packets_of(t: dict) -> str:
    """Whose packets a validation judged, as the report names them."""
    return "ns-3's" if t.get("packets") == "ns3" else "the emulation's"


def _runs_row(t: dict) -> str:
    if t.get("packets") == "ns3":
        return f"| ns-3 runs (simulated: all judged) | {t['runs']} | |"
    return f"| faithful emulated runs | {t['runs'] - t['unfaithful_runs']} of {t['runs']} | all |"


def render_validation(doc: dict, plots: list[Path], folder: Path) -> str:
    lines = [f"# Validation: {doc['scenario']}, packets vs flow model", "",
             *_answer_section(doc, plots, folder),
             "Errors are (flow model - packets) / packets: positive means the flow model is "
             f"slower. *Replay* feeds {_packets_of(doc['targets'])} own transfers (start, "
             "size, endpoints, path) to the flow model: network-model error alone. *Both "
             "engines* lets each engine make its own scheduling decisions from the same "
             "workload and seed.", "",
             *_ecmp_lines(doc), *_summary_table(doc["targets"])]
    lines += three_way_lines(doc, folder)
    lines += model_table.markdown_lines(doc.get("flow_models"))
    lines += claim_lines(doc)
    lines += _verdict_lines(doc)
    lines += divergence_lines(doc)
    lines += _validity_lines(doc)
    unfaithful = [f"{p}/{s}" for p, by in doc["fidelity"].items() for s, v in by.items()
                  if v != "faithful"]
    if doc["targets"].get("packets") == "ns3":
        lines += ["ns-3's runs are simulated: none can fall behind the clock, so every one is "
                  "judged.", ""]
    elif unfaithful:
        lines += [f"**Unfaithful emulation rows** (the machine could not keep up; treat their "
                  f"figures as suspect, marked † below): {', '.join(unfaithful)}", ""]
    else:
        lines += ["Every emulated run was **faithful** (saturated links at >= 95% of their "
                  "rate, CPU headroom kept).", ""]
    lines += _calibration_lines(doc["calibration"])
    lines += _transfer_lines(doc)
    lines += _stall_lines(doc.get("stalls"))
    lines += _arrival_lines(doc.get("arrival"))
    lines += _repeat_lines(doc.get("repeat"))
    lines += _ttft_lines(doc)
    lines += ["", "## Tier distribution of transfers (T0:T1:T2:T3, %)", "",
              "| point | scheduler | packets | flow model (calibrated) |", "|---|---|---|---|"]
    for point, by in doc["tiers"].items():
        for sched, d in by.items():
            lines.append(f"| {point} | {display_name(sched)} | {_tiers(d['packets'])} | "
                         f"{_tiers(d['flow'])} |")
    lines += ["", "## Plots", ""]
    lines += [f"![{p.stem}]({p.relative_to(folder)})" for p in plots]
    lines += ["", "## Run folders", ""]
    lines += [f"- {k}: `{v}`" for k, v in doc["folders"].items()]
    return "\n".join(lines) + "\n"


def _answer_section(doc: dict, plots: list[Path], folder: Path) -> list[str]:
    """The report leads as the terminal does: the answer, its table, the forest plot."""
    wall_file = folder / "wall.json"
    wall = read_json(wall_file, object) if wall_file.exists() else None
    forest = [p for p in plots if p.name == "verdicts.png"]
    return ["## The answer", "", *answer_lines(doc, wall, markdown=True), "",
            *(f"![the claims' verdicts]({p.relative_to(folder)})" for p in forest),
            *([""] if forest else [])]


def _summary_table(t: dict) -> list[str]:
    return [
        "## Summary", "",
        "The verdict uses the flow model with its TCP terms (handshake, slow start, tail; "
        "`network.flow_model: tcp`, the replica's equivalents) on whole transfers (first "
        "shard's start to the slowest shard's end) above the validity floor, and TTFT from "
        "faithful runs only. Brackets are bootstrap 95% confidence intervals.", "",
        "| figure | measured | target |", "|---|---|---|",
        f"| median abs per-transfer error, replay | "
        f"{_abs(t['replay_median_abs_transfer_error'])} {_ci(t['replay_median_ci'])} | "
        f"<= {_abs(t['transfer_target'])}: {reach(t, 'median')[1]} |",
        f"| p90 abs per-transfer error, replay | "
        f"{_abs(t['replay_p90_abs_transfer_error'])} {_ci(t['replay_p90_ci'])} | "
        f"<= {_abs(t['transfer_p90_target'])}: {reach(t, 'p90')[1]} |",
        *_floor_rows(t),
        f"| median abs per-transfer error, both engines | "
        f"{_abs(t['engines_median_abs_transfer_error'])} | <= {_abs(ENGINES_MEDIAN)} "
        f"(scheduling divergence included): "
        f"{reach(t, 'engines')[1]} |",
        f"| mean-TTFT verdicts per scheduler (agree / disagree / inconclusive) | "
        f"{t['ttft_verdicts']['agree']} / {t['ttft_verdicts']['disagree']} / "
        f"{t['ttft_verdicts']['inconclusive']} | all agree: |error| <= "
        f"{_abs(t['ttft_target'])} and the interval inside +-{_abs(t['ttft_ci_target'])} |",
        f"| worst mean-TTFT difference per scheduler | {_abs(t['worst_mean_ttft_error'])} | "
        f"<= {_abs(t['ttft_target'])}: "
        f"{_verdict(_le(t['worst_mean_ttft_error'], t['ttft_target']))} |",
        f"| same scheduler ranking (mean TTFT) | {_yes(t['same_ranking'])} | yes: "
        f"{_verdict(t['same_ranking'])} |",
        _runs_row(t),
        f"| NetKV paper, for reference | flow model overestimates mean TTFT by "
        f"{100 * PAPER_TTFT_OVERESTIMATE[0]:.0f}-{100 * PAPER_TTFT_OVERESTIMATE[1]:.0f}% | |",
        "",
    ]


def _calibration_lines(cal: dict) -> list[str]:
    lines = ["## Calibration", "",
             "| tier | pair | achieved / configured rate | fixed cost per transfer | r2 |",
             "|---|---|---|---|---|"]
    for tier, c in cal["tiers"].items():
        lines.append(f"| {tier} | {' -> '.join(c['pair'])} | {100 * c['factor']:.1f}% | "
                     f"{1e3 * c['overhead_s']:.0f} ms | {c['r2']:.3f} |")
    lines += ["", f"Flow-model capacity factors used: `{cal['capacity_factor']}`", ""]
    return lines + _tcp_fit_lines(cal)


def _transfer_lines(doc: dict) -> list[str]:
    lines = ["", "## Per-transfer completion time", "",
             "| comparison | slice | n | median abs error | p90 abs error | mean error (bias) |",
             "|---|---|---|---|---|---|"]
    for key, label in SLICES.items():
        s = doc["transfers"][key]
        groups = [("all", s)] + [(f"tier {k}", v) for k, v in s["by_tier"].items()] + \
            list(s["by_size"].items())
        for name, g in groups:
            lines.append(f"| {label} | {name} | {g['n']} | {_abs(g['median_abs_error'])} | "
                         f"{_abs(g['p90_abs_error'])} | {_pct(g['mean_error'])} |")
    return lines


def _ttft_lines(doc: dict) -> list[str]:
    lines = []
    for phase in ("uncalibrated", "calibrated", "tcp"):
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
                    f"| {display_name(m['scheduler'])}{mark} | "
                    f"{_ms(m['ttft_mean_ms_reference'])} / {_ms(m['ttft_mean_ms_model'])} | "
                    f"{_pct(m['ttft_mean_ms_error'])} | {_ms(m['ttft_p50_ms_reference'])} / "
                    f"{_ms(m['ttft_p50_ms_model'])} | {_ms(m['ttft_p99_ms_reference'])} / "
                    f"{_ms(m['ttft_p99_ms_model'])} | {_ms(m['transfer_mean_ms_reference'])} / "
                    f"{_ms(m['transfer_mean_ms_model'])} | {_pct(m['transfer_mean_ms_error'])} |")
            r = data["ranking"]
            names = [display_name(k) for k in r["reference"]]
            model = [display_name(k) for k in r["model"]]
            lines += ["", f"Ranking by mean TTFT: packets {' < '.join(names)}; flow "
                      f"{' < '.join(model)}: "
                      f"{'same order' if r['same_order'] else '**different order**'} "
                      f"(Kendall tau {r['kendall_tau']:.2f})."]
    return lines


def _stall_lines(stalls: dict | None) -> list[str]:
    """Which transfers stalled on packets (the senders' TCP_INFO), and the TCP model's
    replay error on them apart from the rest."""
    if not stalls or not stalls["connections"]["transfers"]:
        return []
    lines = ["", "## Why transfers stalled (the senders' TCP_INFO)", "",
             f"On packets: {describe_stalls(stalls['connections'])}.", ""]
    split = stalls["replay_tcp"]
    if split["timed_out"]["n"] or split["clean"]["n"]:
        lines += ["| replay, TCP model | n | median abs error | p90 abs error | mean error |",
                  "|---|---|---|---|---|"]
        for key, label in (("timed_out", "connections with a retransmission timeout"),
                           ("clean", "connections without one")):
            g = split[key]
            lines.append(f"| {label} | {g['n']} | {_abs(g['median_abs_error'])} | "
                         f"{_abs(g['p90_abs_error'])} | {_pct(g['mean_error'])} |")
    return lines


def _arrival_lines(by_order: dict | None) -> list[str]:
    """The replay's error on whole transfers above the floor by arrival order on their
    path (testbed/validate/judging/arrival.py says what each order means)."""
    if not by_order or not any(g["n"] for g in by_order.values()):
        return []
    lines = ["", "## Where the replay errs: arrival order on the path", "",
             "Whole transfers above the validity floor, TCP model. *alone*: no other "
             "transfer shared a link with it while it ran; *first*: others came while it ran; "
             "*late*: it came while others ran, none after; *both*. Max-min sharing ends "
             "competing transfers as a work-conserving link does, so the one that came first "
             "carries the difference: a positive mean there says packets let it keep more "
             "than an equal share.", "",
             "| arrival | n | median abs error | p90 abs error | mean error |",
             "|---|---|---|---|---|"]
    for order, g in by_order.items():
        lines.append(f"| {order} | {g['n']} | {_abs(g['median_abs_error'])} | "
                     f"{_abs(g['p90_abs_error'])} | {_pct(g['mean_error'])} |")
    return lines


def _floor_rows(t: dict) -> list[str]:
    """The summary table's rows for packets against packets, where it was measured."""
    if t.get("packets_p90_abs_transfer_error") is None:
        return []
    return [f"| p90 abs per-transfer error, packets against packets ({runs_of(t)}) | "
            f"{_abs(t['packets_p90_abs_transfer_error'])} (median "
            f"{_abs(t['packets_median_abs_transfer_error'])}); the replay on the same "
            f"transfers: {_abs(t['replay_same_p90_abs_transfer_error'])} | the floor: no "
            f"model is judged closer than packets are to themselves |"]


def _ran_again(floor: dict) -> str:
    """Which cells ran again: the first seed (the emulation), or the first few (ns-3,
    each run perturbed: docs/validation.md)."""
    cells = len(floor["cells"])
    which = "The first seed" if cells == 1 else f"{cells} cells"
    return f"{which} ran {floor['runs']} times on packets"


def _repeat_lines(floor: dict | None) -> list[str]:
    """Packets against packets (testbed/validate/engines/repeat.py), beside the replay."""
    if not floor:
        return []
    same = floor.get("replay_same_transfers") or {}
    lines = ["", "## Packets against packets", "",
             f"{_ran_again(floor)} ({', '.join(floor['cells'])}; faithful runs only). "
             "In every pair of runs, each one's time of a whole "
             "transfer above the validity floor against the other's, where the two offered it "
             "alike (the same hosts and paths; its shards, and every transfer that shared a "
             "link with it, starting at the same moments): what the best deterministic model "
             "of these runs would err by, since it sees only what was offered. "
             f"{100 * floor['offered_alike']:.0f}% of the first run's transfers above the "
             "floor were offered alike in some pair.", "",
             "| | n | median abs error | p90 abs error | mean error |", "|---|---|---|---|---|",
             f"| packets against packets (a transfer once per run of each pair) | {floor['n']} | "
             f"{_abs(floor['median_abs_error'])} | "
             f"{_abs(floor['p90_abs_error'])} {_ci(floor.get('p90_ci') or (None, None))} | "
             f"{_pct(floor['mean_error'])} |"]
    if same:
        lines.append(f"| the replay (TCP model), same transfers of the first run | {same['n']} | "
                     f"{_abs(same['median_abs_error'])} | {_abs(same['p90_abs_error'])} | "
                     f"{_pct(same['mean_error'])} |")
    engines = floor.get("engines")
    if engines:
        lines.append(f"| packets deciding again: every whole transfer two runs made, wherever "
                     f"each placed it ({', '.join(engines['schedulers'])}; the both-engines "
                     f"figure's floor) | {engines['n']} | {_abs(engines['median_abs_error'])} "
                     f"{_ci(engines['median_ci'])} | {_abs(engines['p90_abs_error'])} | "
                     f"{_pct(engines['mean_error'])} |")
    lines.append("")
    lines.append("By arrival order on the path (as above): " + "; ".join(
        f"{order} n={g['n']}, p90 {_abs(g['p90_abs_error'])}"
        for order, g in floor["by_arrival"].items() if g["n"]) + ".")
    return lines


def _ci(pair) -> str:
    lo, hi = pair
    return "" if lo is None or lo != lo else f"[{100 * lo:.1f}, {100 * hi:.1f}]"


def _yes(x) -> str:
    return "-" if x is None else ("yes" if x else "no")


def _verdict_lines(doc: dict) -> list[str]:
    lines = ["## Mean TTFT per scheduler, with confidence", "",
             "Paired over the requests both engines served (pooled over seeds; faithful runs "
             "only).", "", "| flow model | point | scheduler | verdict |", "|---|---|---|---|"]
    for model, by_point in doc.get("ttft_verdicts", {}).items():
        for point, by in by_point.items():
            for sched, v in by.items():
                lines.append(f"| {model} | {point} | {display_name(sched)} | "
                             f"{v['sentence']} |")
    for model, by_point in doc.get("seed_rankings", {}).items():
        for point, r in by_point.items():
            lines.append("")
            lines.append(f"Ranking ({model}, {point}): same order in {r['same']} of "
                         f"{r['seeds']} seed(s).")
    for point, r in (doc.get("draw_rankings") or {}).items():
        lines += ["", f"Packets against their own draws ({point}): two runs of one workload "
                  f"rank the schedulers alike in {r['alike']} of {r['pairs']} pairs "
                  f"({100 * r['share']:.0f}%); a seed's ranking is one such draw."]
    if doc.get("excluded_runs"):
        lines += ["", f"Left out of the TTFT verdicts (flagged by the fidelity monitor): "
                  f"{', '.join(doc['excluded_runs'])}."]
    return lines + [""]


def _validity_lines(doc: dict) -> list[str]:
    v = doc.get("validity")
    if not v:
        return []
    seg = v["segments_per_shard"]
    model = v.get("model_shard_spread", {})
    lines = ["## Validity of the replica for the modelled cluster", "",
             f"Wire segments per shard: p10 {seg['p10']:.0f}, median {seg['p50']:.0f}, "
             f"p90 {seg['p90']:.0f} (n={seg['n']}). Slowest / fastest shard of a transfer on "
             f"packets: median {v['shard_spread']['p50']:.2f}x, p90 "
             f"{v['shard_spread']['p90']:.2f}x; in the TCP flow model's replay (shard "
             f"spread {doc['calibration'].get('tcp', {}).get('shard_spread', 0.0):.2f}, "
             f"fitted on lone transfers): median {model.get('p50', 1.0):.2f}x, "
             f"p90 {model.get('p90', 1.0):.2f}x.", "",
             f"Below the floor, the replica's TCP start-up (few, large segments; long round "
             f"trips in modelled time) adds more than {100 * v['tolerance']:.0f}% of a "
             "transfer's time beyond what the cluster's own would: those transfers are "
             "reported apart and not judged.", "",
             "| tier | base RTT, replica / cluster (modelled) | floor per transfer | "
             "segments per shard at the floor |", "|---|---|---|---|"]
    for tier, f in v["tiers"].items():
        lines.append(f"| {tier} | {1e3 * f['rtt_replica_s']:.2f} ms / "
                     f"{1e6 * f['rtt_cluster_s']:.1f} us | "
                     f"{f['transfer_floor_bytes'] / 1e6:.0f} MB | {f['floor_segments']} |")
    above = doc["whole_above_floor"].get("replay_tcp", {})
    below = doc["whole_below_floor"].get("replay_tcp", {})
    lines += ["", f"Replay with TCP terms: {above.get('n', 0)} transfers above the floor "
              f"(median |error| {_abs(above.get('median_abs_error'))}), {below.get('n', 0)} "
              f"below (median |error| {_abs(below.get('median_abs_error'))})."]
    if v.get("clear_90"):
        c = v["clear_90"]
        knob = (f"ns3.scale {c['scale']:.2g}" if doc["targets"].get("packets") == "ns3" else
                f"emulation.scale {c['scale']:.2g} with time_dilation "
                f"{c['time_dilation']:.2g} (same packet rate)")
        lines.append(f"To lift {100 * c['share']:.0f}% of transfers above the floor: {knob}.")
    header = ["| {} | n | median abs error [95% CI] | p90 abs error [95% CI] | mean error (bias) |",
              "|---|---|---|---|---|"]
    lines += ["", "## Whole transfers, per flow model (replay and both engines)", "",
              header[0].format("comparison"), header[1]]
    lines += [_interval_row(name, w) for name, w in doc["whole_transfers"].items()]
    if doc.get("tcp_ablation"):
        lines += ["", "Each TCP term on its own (replay, whole transfers, all sizes): the full "
                  "TCP model is the replay_tcp row above; each variant changes one term.", "",
                  header[0].format("variant"), header[1]]
        lines += [_interval_row(name, w) for name, w in doc["tcp_ablation"].items()]
    return lines + _beside_lines(doc) + [""]


# what each term judged beside the verdict's model does, given its fitted value
_BESIDE_TEXT = {
    "spread": lambda v: (f"a transfer's parallel streams share unequally (the first of n "
                         f"{1 + v:.2f}x, the last {1 - v:.2f}x an equal share), so it ends "
                         "with its slowest; in the verdict's model, judged without it"),
    "contention": lambda v: (f"the time a stream loses to competitors stretches "
                             f"{1 / (1 - v):.2f}x (idle share {100 * v:.0f}%)"),
    "join_stall": lambda v: (f"a stream that joins a path others keep saturated sends "
                             f"nothing for {1e3 * v:.0f} modelled ms after its handshake "
                             "unless it fits in its first window"),
}


def _beside_lines(doc: dict) -> list[str]:
    """Each fitted term both ways beside the verdict's model (validate/comparison/beside.py)."""
    terms = {k: doc[k] for k in _BESIDE_TEXT if doc.get(k)}
    if not terms:
        return []
    whole = doc["whole_transfers"]

    def row(name, replay, engines, verdicts, ranks) -> str:
        kinds = [v["verdict"] for by in verdicts.values() for v in by.values()]
        same = "; ".join(f"{r['same']}/{r['seeds']}" for r in ranks.values()) or "-"
        return (f"| {name} | {_abs(replay.get('median_abs_error'))} / "
                f"{_abs(replay.get('p90_abs_error'))} | {_abs(engines.get('median_abs_error'))}"
                f" / {_abs(engines.get('p90_abs_error'))} | {kinds.count('agree')} / "
                f"{kinds.count('disagree')} / {kinds.count('inconclusive')} | {same} |")
    lines = ["", "Terms fitted on the calibration's probes alone, each judged the other way "
             "beside the verdict's model: with it where the verdict leaves it out, without it "
             "where the verdict has it (docs/validation.md, \"Which terms are on\"):", ""]
    lines += [f"- {t['title']} ({t['value']:.3g}): {_BESIDE_TEXT[k](t['value'])}"
              for k, t in terms.items()]
    lines += ["", "| model | replay median / p90 | both engines median / p90 | mean TTFT agree "
              "/ disagree / inconclusive | same ranking (seeds) |", "|---|---|---|---|---|",
              row("TCP model (the verdict's)", whole.get("replay_tcp", {}),
                  whole.get("engines_tcp", {}), doc["ttft_verdicts"]["tcp"],
                  doc["seed_rankings"]["tcp"])]
    lines += [row(f"{'without' if t.get('in_verdict') else 'with'} {t['title']}", t["replay"],
                  t["engines"], t["ttft_verdicts"], t["seed_rankings"])
              for t in terms.values()]
    return lines


def _interval_row(name: str, w: dict) -> str:
    ci = w["ci"]
    return (f"| {name} | {w['n']} | {_abs(w['median_abs_error'])} "
            f"{_ci([ci['median_abs_error']['low'], ci['median_abs_error']['high']])} | "
            f"{_abs(w['p90_abs_error'])} "
            f"{_ci([ci['p90_abs_error']['low'], ci['p90_abs_error']['high']])} | "
            f"{_pct(w['mean_error'])} |")


def _tcp_fit_lines(cal: dict) -> list[str]:
    fit = cal.get("tcp")
    if not fit:
        return ["(This calibration has no TCP fit: the TCP terms use derived defaults.)"]
    lines = [f"TCP terms fitted on the lone probes ({len(fit['residuals'])} sizes x tiers, "
             f"three decades): serialisation share {fit['serialisation']:.2f}, per-hop delay "
             f"{1e6 * fit['hop_delay_s']:.0f} us wall. Median |error| on the probes: TCP model "
             f"{_abs(fit['median_abs_error'])}, fluid {_abs(fit.get('fluid_median_abs_error'))}.",
             "", "| tier | size (modelled) | packets | TCP model error |", "|---|---|---|---|"]
    for r in fit["residuals"]:
        lines.append(f"| {r['tier']} | {r['bytes'] / 1e6:.0f} MB | {1e3 * r['seconds']:.1f} ms | "
                     f"{_pct(r['tcp_error'])} |")
    if cal.get("competing"):
        idle, stall = fit.get("contention_idle"), fit.get("join_stall_s")
        lines += ["", "Competing transfers on one path, started together or spaced (slowest of "
                  "n; fastest beside it shows how unequal the shares were); the link "
                  "contention fitted on them: "
                  + ("none" if idle is None else f"idle share {100 * idle:.0f}% (the time a "
                     f"stream loses to competitors stretches {1 / (1 - idle):.2f}x)")
                  + "; the join stall fitted on the spaced ones: "
                  + ("none" if stall is None else f"{1e3 * stall:.0f} modelled ms"), "",
                  "| tier | n x size | spacing | slowest / fastest (ms) | TCP model error | "
                  "with contention | fluid error | its own fit | TCP model error per "
                  "transfer, first arrival first | the same with the join stall |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for c in cal["competing"]:
            lines.append(f"| {c['tier']} | {c['competing']} x {c.get('bytes', 5e8) / 1e6:.0f} MB"
                         f" | {1e3 * c.get('spacing_s', 0.0):.0f} ms | "
                         f"{1e3 * c['slowest_s']:.0f} / {1e3 * c['fastest_s']:.0f} | "
                         f"{_pct(c['tcp_error'])} | {_pct(c.get('contended_error'))} | "
                         f"{_pct(c['fluid_error'])} | {_abs(c.get('idle_estimate'))} | "
                         f"{' / '.join(_pct(e) for e in c.get('by_arrival', [])) or '-'} | "
                         f"{' / '.join(_pct(e) for e in c.get('by_arrival_joined', [])) or '-'}"
                         " |")
    return lines


def _le(x, bound) -> bool | None:
    return None if x is None or x != x else x <= bound


def _tiers(share: dict) -> str:
    return ":".join(f"{100 * share.get(str(t), 0.0):.0f}" for t in range(4))
