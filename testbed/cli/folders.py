"""Commands over finished run folders, no root needed: judge a validation again, compare
two runs, and measure how far repeated packet runs are from each other."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click
import yaml

from testbed.cli.common import _fail, main, reads_records
from testbed.cli.options import Number
from testbed.scenario import ScenarioError
from testbed.workloads.mooncake import TraceError


@main.command()
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--verbose", is_flag=True, help="Print every figure's line before the answer.")
@click.option("--predictions", type=click.Path(dir_okay=False, exists=True), default=None,
              metavar="FILE", help="Judge another simulator's predictions (CSV: cell, "
              "request, ttft_s[, transfer_s]; docs/predictions.md) against the run FOLDER "
              "(a run folder, or a validation's packets) instead.")
@click.option("--flow-model", "flow_models", multiple=True, metavar="NAME",
              help="Judge these network models against FOLDER's packets (repeatable; "
              "`testbed network-models` lists them), a row each beside max-min; the rest "
              "of the document is kept as it is.")
def judge(folder: str, verbose: bool, predictions: str | None,
          flow_models: tuple[str, ...]) -> None:
    """Judge a finished validation FOLDER again with today's flow model (no root).

    Keeps its packets run and calibration, runs the flow model anew (uncalibrated,
    calibrated, with TCP terms) beside the old runs, and rewrites comparison.json,
    report.md and plots/. Use it after changing the flow model or its network.tcp
    settings to see how the verdict moves, without emulating again.

    With --predictions FILE: another simulator's per-request TTFT (and per-transfer
    times) for the work FOLDER's run served (`testbed export-workload FOLDER` writes it
    out), judged with validate's statistics: mean TTFT per scheduler, the paper's claims,
    the transfers. FOLDER/predictions-<name>/ gets judged.json and report.md; a bad line
    is named (line and field), exit 2, nothing written.
    """
    from testbed.inputs import reading
    from testbed.records import unchanged_on_failure
    from testbed.results import ValidationResult
    from testbed.sweep import Executor
    from testbed.validate.pipelines.flow_models import check_models
    from testbed.validate.pipelines.judge_folder import judge_again, with_flow_models

    if predictions:
        with reading(folder):
            _judge_predictions(Path(folder), Path(predictions))
        return
    try:
        models = check_models(list(flow_models)) if flow_models else []
        # the folder as it was unless the whole judgement lands
        with reading(folder), unchanged_on_failure(Path(folder)), \
                Executor.local(0) as pool:  # the flow model's runs and draws on every core
            if models:
                with_flow_models(Path(folder), models, pool)
            else:
                judge_again(Path(folder), pool)
            result = ValidationResult(Path(folder))
            lines = (result.summary_lines() + [""] if verbose else []) + result.answer_lines()
    except (ValueError, ScenarioError, TraceError) as exc:
        _fail(str(exc))
    for line in lines:
        click.echo(line)
    click.echo(f"Report: {result.report}")


def _judge_predictions(folder: Path, path: Path) -> None:
    from testbed.records import atomic_write, write_json
    from testbed.validate.report import predictions as pred
    from testbed.validate.report.exported import run_folder

    try:
        run = run_folder(folder)
        cells = pred.run_cells(run)
        got = pred.parse(path, cells)
    except ValueError as exc:  # PredictionError among them
        _fail(str(exc))
    doc = pred.judge(run, got, cells)
    out = folder / f"predictions-{path.stem}"
    staged = folder / f".{out.name}.new"  # written whole beside, then put in place
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir()
    write_json(staged / "judged.json", doc)
    atomic_write(staged / "report.md", pred.report(doc, path.name))
    shutil.rmtree(out, ignore_errors=True)
    staged.rename(out)
    for line in pred.answer_lines(doc, path.name):
        click.echo(line)
    click.echo(f"Report: {out / 'report.md'}")


@main.command("export-workload")
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--out", "out_file", type=click.Path(dir_okay=False), default=None,
              help="Where the file goes (default: FOLDER/workload.json; - for stdout).")
def export_workload(folder: str, out_file: str | None) -> None:
    """Write the exact work a finished run FOLDER served, for another simulator.

    Per cell (point/scheduler/seed) every request (arrival, token counts, prefix hits, KV
    and transferred bytes, the prefill and decode instances chosen, the tier) and every
    KV transfer shard (endpoints, tier, bytes, start), with the fabric (each instance's
    pod, rack and server; each tier's bandwidth and latency; ECMP, background) and the
    model's KV bytes per token: JSON, schema in docs/schemas/workload.schema.json. A
    validation folder exports its packets' run. Predict each request's TTFT, then
    `testbed judge --predictions FILE FOLDER`.
    """
    from testbed.inputs import reading
    from testbed.records import atomic_write
    from testbed.validate.report.exported import export

    try:
        with reading(folder):
            doc = export(Path(folder))
    except (ValueError, ScenarioError) as exc:
        _fail(str(exc))
    text = doc.model_dump_json(indent=1) + "\n"
    if out_file == "-":
        click.echo(text, nl=False)
        return
    target = Path(out_file) if out_file else Path(folder) / "workload.json"
    atomic_write(target, text)
    n = sum(len(c.requests) for c in doc.cells)
    click.echo(f"{len(doc.cells)} cells, {n} requests written to {target}")


@main.command("compare")
@click.argument("reference", type=click.Path(file_okay=False))
@click.argument("model", type=click.Path(file_okay=False))
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Where report.md and comparison.json go (default: MODEL/compare).")
@reads_records
def compare_cmd(reference: str, model: str, out_dir: str | None) -> None:
    """Compare two run folders cell by cell: REFERENCE (e.g. packets) vs MODEL (flows).

    Pairs every transfer by (request, shard) and reports the model's relative error
    overall, per tier and per size bucket; per sweep point compares TTFT and transfer
    time per scheduler and whether both rank the schedulers the same. Two flow-level
    runs work too, e.g. per-transfer against per-flow ECMP.
    """
    from testbed.validate.report.folder_comparison import RunFolderError, compare_runs

    out = Path(out_dir) if out_dir else Path(model) / "compare"
    try:
        doc = compare_runs(Path(reference), Path(model), out)
    except RunFolderError as exc:
        _fail(str(exc))
    t = doc["transfers"]
    click.echo(f"{doc['cells']} cells, {t['n']} transfers: median |error| "
               f"{100 * t['median_abs_error']:.1f}%, bias {100 * t['mean_error']:+.1f}%")
    for point, data in doc["points"].items():
        r = data["ranking"]
        click.echo(f"{point}: ranking {'agrees' if r['same_order'] else 'differs'} "
                   f"(tau {r['kendall_tau']:.2f})")
    click.echo(f"report: {out / 'report.md'}")


# what repeated runs must share to be repeats of one another
_SAME = ("name", "cluster", "emulation.scale", "emulation.time_dilation")


@main.command("repeat")
@click.argument("folders", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True))
@click.option("--scheduler", "schedulers", multiple=True, metavar="KEY",
              help="Judge this scheduler's cells (repeatable; default: rr where every run "
              "has it, else all). Others than RR place requests by load, so the transfers "
              "around one placed alike differ from run to run.")
@reads_records
def repeat_cmd(folders: tuple[str, ...], schedulers: tuple[str, ...]) -> None:
    """How far repeated packet runs of one scenario are from each other (no root).

    FOLDERS: validation folders (their packet run, the emulation's or ns-3's, and any
    made again with `validate --repeats`) or emulation run folders, of the same scenario,
    two runs at least. For
    every cell (point, scheduler, seed) and every pair of runs that ran it faithfully,
    each run's time of a whole transfer above the validity floor is set against the
    other's where the two offered it alike: the same hosts and paths, and its shards and
    every transfer that shared a link with it starting at the same moments (within 5% of
    its time). The median and p90 of that error are the floor for any flow model's
    per-transfer error on this fabric: packets are no closer to themselves. RR's runs
    place every request alike; a scheduler that reads load soon places them apart, and
    only what it placed alike counts. Where every judged scheduler ran again, also
    packets deciding again: every whole transfer two runs both made, wherever each
    placed it (the floor of the both-engines figure).

      testbed repeat results/validate-validate-A results/validate-validate-B
    """
    from testbed.validate.comparison.sections import cells_of
    from testbed.validate.comparison.verdicts import faithful_cells
    from testbed.validate.engines import repeat

    runs, scenarios = [], []
    for name in folders:
        folder = Path(name)
        own = sorted(folder.glob("*-emulation-*")) or sorted(folder.glob("*-ns3-*"))
        emus = own + repeat.repeat_folders(folder)
        for run in emus or [folder]:
            cells = cells_of(run)
            if not cells:
                _fail(f"{run}: no packet run here (expected cells/<point>/<scheduler>/seed*/)")
            kept, flagged = faithful_cells(cells)
            if not kept:
                _fail(f"{run}: the fidelity monitor flagged every cell ({', '.join(flagged)}); "
                      "an unfaithful run says nothing of packets: leave it out")
            runs.append(kept)
        scenarios.append(_scenario_of(folder))
    for field in _SAME:
        values = [_field(s, field) for s in scenarios]
        if any(v != values[0] for v in values):
            _fail(f"{folders[values.index(next(v for v in values if v != values[0]))]}: "
                  f"{field} differs from {folders[0]}'s; repeats must share it")
    if not schedulers:
        everywhere = set.intersection(*({k.split("/")[1] for k in r} for r in runs))
        schedulers = ("rr",) if "rr" in everywhere else tuple(everywhere)
    runs = [{k: c for k, c in r.items() if k.split("/")[1] in schedulers} for r in runs]
    if len(runs) < 2:
        _fail("one packet run only: give two folders, or a validation made with --repeats")
    first = Path(folders[0])
    floor = repeat.packets_against_packets(runs, _floors(first, scenarios[0]),
                                           _replay(first, scenarios[0], runs[0]))
    if floor is None:
        _fail("no transfer above the validity floor was offered alike in any pair of runs "
              "(no cell faithful in two of them, a scheduler that reads load, or starts that "
              "moved: a longer window or more runs give more)")
    click.echo(f"{floor['runs']} packet runs, cells {', '.join(floor['cells'])}; "
               f"{100 * floor['offered_alike']:.0f}% of the first run's transfers above the "
               f"floor offered alike in some pair; packets against packets, n={floor['n']}: "
               f"median |error| "
               f"{100 * floor['median_abs_error']:.1f}%, p90 {100 * floor['p90_abs_error']:.1f}% "
               f"[95% CI {100 * floor['p90_ci'][0]:.1f}, {100 * floor['p90_ci'][1]:.1f}, "
               f"resampling its {floor['transfers']} transfers]")
    for order, g in floor["by_arrival"].items():
        if g["n"]:
            click.echo(f"  {order}: n={g['n']}, median {100 * g['median_abs_error']:.1f}%, "
                       f"p90 {100 * g['p90_abs_error']:.1f}%")
    engines = floor.get("engines")
    if engines:
        click.echo(f"packets deciding again ({', '.join(engines['schedulers'])}; every whole "
                   f"transfer two runs made, wherever placed: the both-engines figure's "
                   f"floor), n={engines['n']}: median |error| "
                   f"{100 * engines['median_abs_error']:.1f}%, p90 "
                   f"{100 * engines['p90_abs_error']:.1f}%")
    same = floor["replay_same_transfers"]
    if same and same["n"]:
        click.echo(f"the flow model's replay (TCP terms, {first}'s calibration) of the first "
                   f"run, same transfers, n={same['n']}: median |error| "
                   f"{100 * same['median_abs_error']:.1f}%, p90 {100 * same['p90_abs_error']:.1f}%")


def _replay(folder: Path, raw: dict, cells: dict) -> dict | None:
    """The verdict's model replaying `cells` (the first run's), where `folder` is a
    validation with its calibration; None otherwise."""
    from testbed.scenario import Scenario
    from testbed.validate.engines.contention import with_probe_fits
    from testbed.validate.engines.flow_match import replay_scenario
    from testbed.validate.engines.flow_replay import replay_cells

    try:
        cal = json.loads((folder / "calibration.json").read_text())
        factors = {int(k): float(v) for k, v in cal["capacity_factor"].items()}
        scenario = Scenario.model_validate(raw)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    cal = with_probe_fits(scenario, cal)
    return replay_cells(replay_scenario(scenario, factors, cal.get("tcp", {})), cells, factors)


def _scenario_of(folder: Path) -> dict:
    from testbed.inputs import read_text

    try:
        raw = yaml.safe_load(read_text(folder / "scenario.yaml"))
    except (ValueError, yaml.YAMLError) as exc:
        _fail(f"{folder}: no readable scenario.yaml ({exc})")
    if not isinstance(raw, dict):
        _fail(f"{folder}/scenario.yaml: not a scenario")
    return raw


def _field(raw: dict, dotted: str):
    for part in dotted.split("."):
        raw = raw.get(part) if isinstance(raw, dict) else None
    return raw


def _floors(folder: Path, raw: dict) -> dict[int, dict]:
    """The validity floor a validation judged with, or the scenario's own."""
    from testbed.scenario import Scenario
    from testbed.validate.comparison.document import load
    from testbed.validate.judging import validity

    try:  # an older or missing comparison.json: the scenario's own floors
        tiers = load(folder / "comparison.json")["validity"]["tiers"]
        return {int(t): v for t, v in tiers.items()}
    except (ValueError, KeyError):
        try:
            return validity.floors(Scenario.model_validate(raw))
        except ValueError as exc:
            _fail(f"{folder}/scenario.yaml: {exc}")


@main.command("replay")
@click.argument("folders", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--jobs", type=Number(0, 4096, integer=True), default=0, show_default=True,
              help="Processes replaying at once (0: one per core).")
@click.option("--out", type=click.Path(file_okay=False), default="results", show_default=True,
              help="Where the replay's folder goes (replay-ns3-<stamp>/).")
@reads_records
def replay_cmd(folders: tuple[str, ...], jobs: int, out: str) -> None:
    """ns-3 fed the emulation's own schedule, judged transfer by transfer (no root).

    FOLDERS: emulation run folders, or validations holding one. Every faithful run's KV
    shards start on ns-3's twin of the emulation (its replica in modelled time, Linux's
    sender, the kernel's wall-time constants at its dilation) at their recorded
    instants, on their paths, with the run's background; each whole transfer's time is
    set against the emulation's: median and p90 |error| with intervals (above the
    validity floor, and all), the bias per tier and per number of competitors, and how
    often exactly one engine waited out a retransmission timeout. With two runs of one
    scenario and seed (an emulation's own repeat), the emulation's floor beside it and
    ns-3's error on those very transfers. A folder that cannot be replayed (partial,
    unfaithful, faults, KV levels, per-flow ECMP, another replica) is refused, exit 2,
    before anything runs; nothing is written into any folder given.

      testbed replay results/validate-emulation-A results/validate-emulation-B
    """
    from testbed.ns3sim.program import Ns3Unavailable
    from testbed.sweep import Executor
    from testbed.validate.engines.ns3_replay import Unreplayable, replay_runs
    from testbed.validate.judging.words import replay_lines

    try:
        with Executor.local(jobs) as pool:
            doc, folder = replay_runs([Path(f) for f in folders], pool, Path(out),
                                      on_step=click.echo)
    except (Unreplayable, Ns3Unavailable, ValueError, ScenarioError) as exc:
        _fail(str(exc))
    for line in replay_lines(doc):
        click.echo(line)
    click.echo(f"Replays: {folder}")
