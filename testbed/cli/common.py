"""What every command family shares: the group, consoles, errors, and SCENARIO.

SCENARIO is one click parameter type (ScenarioFile): it loads the file with the command's
--set overrides (and --seeds) applied and validates it, so a bad file or override is
reported by click as an invalid SCENARIO, naming the field or line, with exit code 2.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import traceback
from pathlib import Path

import click
import yaml
from rich.console import Console

from testbed import yamlfile
from testbed.cells import RunsLost
from testbed.inputs import InputError
from testbed.ns3sim.program import Ns3Unavailable
from testbed.records import Terminated, raise_terminated, stamp
from testbed.scenario import ScenarioError, load_scenario
from testbed.workloads.mooncake import TraceError

console = Console(stderr=True)
out = Console()
SETS, SEEDS, CAPTURE = "testbed.sets", "testbed.seeds", "testbed.capture"

def _parse_sets(values: tuple[str, ...]) -> dict:
    overrides = {}
    for item in values:
        if "=" not in item:
            raise click.BadParameter(f"expected FIELD=VALUE, got {item!r}", param_hint="--set")
        key, raw = item.split("=", 1)
        try:
            overrides[key.strip()] = yamlfile.load(raw)
        except yaml.YAMLError as exc:
            raise click.BadParameter(f"{key.strip()}: the value is not valid YAML ({exc})",
                                     param_hint="--set") from None
    return overrides

def _fail(message: str) -> None:
    console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    sys.exit(2)


def _os_message(exc: OSError) -> str:
    where = exc.filename if exc.filename is not None else "a file"
    return f"{where}: {exc.strerror or exc}"


def _crash(exc: BaseException) -> None:
    """An error nobody foresaw: a short line and the traceback saved, not a wall of it."""
    text = "".join(traceback.format_exception(exc))
    path = Path(tempfile.gettempdir()) / f"netkv-testbed-crash-{stamp()}-{os.getpid()}.txt"
    try:
        path.write_text(" ".join(sys.argv) + "\n\n" + text)
        saved = f"traceback saved to {path}"
    except OSError:
        saved = "the traceback could not be saved:\n" + text
    console.print(f"[bold red]internal error:[/] {type(exc).__name__}: {exc} (a bug in "
                  f"netkv-testbed; {saved}; please report it)", highlight=False, soft_wrap=True)
    sys.exit(1)


class _Boundary(click.Group):
    """The one error boundary: every command's known failures end as `error: <file>:
    <field or line>: <what>` with exit 2, Ctrl-C as 130 and SIGTERM as 143 (after every
    teardown ran), anything else as a short line plus a saved traceback, exit 1."""

    def invoke(self, ctx):
        handle_signals()
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit,
                click.exceptions.Abort):
            raise
        except KeyboardInterrupt:
            console.print("interrupted (SIGINT)")
            sys.exit(130)
        except Terminated:
            console.print("terminated (SIGTERM)")
            sys.exit(143)
        except (ScenarioError, TraceError, InputError, Ns3Unavailable, RunsLost) as exc:
            _fail(str(exc))
        except OSError as exc:
            _fail(_os_message(exc))
        except Exception as exc:  # noqa: BLE001 - the boundary
            _crash(exc)


@click.group(cls=_Boundary, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="netkv-testbed")
def main() -> None:
    """netkv-testbed: does network-aware KV-cache scheduling (NetKV) cut TTFT?

    Scenarios are YAML files (see scenarios/). Start with:

    \b
      testbed check scenarios/default.yaml      validate and describe a scenario
      testbed simulate scenarios/default.yaml   run it in the flow-level simulator
      testbed validate scenarios/validate.yaml  packets vs flow model (root)
      testbed provision --local                 make this machine a testbed host
    """

SET_HELP = "Override a scenario field, e.g. --set workload.load=2.0 (repeatable)."

def handle_signals() -> None:
    """SIGTERM and SIGINT interrupt a run so that every teardown runs. SIGINT is set
    explicitly: a process started by one that ignores it (a shell's background job, a CI
    runner) inherits SIG_IGN, and Python then leaves Ctrl-C ignored."""
    signal.signal(signal.SIGTERM, raise_terminated)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _remember(key: str):
    def store(ctx: click.Context, _param, value):
        ctx.meta[key] = value
        return value
    return store


class ScenarioFile(click.ParamType):
    """A scenario YAML file, loaded and validated with the command's overrides."""

    name = "SCENARIO"

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value  # already loaded
        meta = ctx.meta if ctx is not None else {}
        try:
            overrides = _parse_sets(meta.get(SETS) or ())
            if meta.get(SEEDS) is not None:
                overrides["seeds"] = meta[SEEDS]
            if meta.get(CAPTURE):
                overrides["emulation.capture"] = meta[CAPTURE]
            return load_scenario(value, overrides)
        except (ScenarioError, TraceError) as exc:
            self.fail(str(exc), param, ctx)


def capture_option(fn):
    """--capture LINK,...: emulation.capture from the command line (applied with --set)."""
    def store(ctx: click.Context, _param, value):
        if value:
            ctx.meta[CAPTURE] = [x.strip() for x in value.split(",") if x.strip()]
        return value

    return click.option(
        "--capture", metavar="LINK,...", is_eager=True, expose_value=False, callback=store,
        help="Record the packets of these links in every run: 'a>b' (what a sends toward "
        "b) or 'a-b' (both ways), e.g. --capture 'tor0>agg0,agg0-core0'. Each run gets "
        "capture/<a>_<b>.pcap per direction (headers: emulation.capture_snaplen; Wireshark "
        "reads them) and capture/flows.csv, a row per flow with its packets, bytes, DSCP "
        "and segments resent. `testbed topology SCENARIO --links` lists the links.")(fn)


def scenario_options(seeds: bool = False, many: bool = False):
    """SCENARIO, --set (and --seeds): the command receives `scenario`, a Scenario (with
    `many`, a tuple of one or more, each with the same overrides)."""
    def wrap(fn):
        fn = click.argument("scenario", type=ScenarioFile(), nargs=-1 if many else 1,
                            required=True)(fn)
        if seeds:
            fn = click.option("--seeds", type=click.IntRange(min=1), is_eager=True,
                              expose_value=False, callback=_remember(SEEDS),
                              help="Repetitions (overrides the file).")(fn)
        return click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE",
                            help=SET_HELP, is_eager=True, expose_value=False,
                            callback=_remember(SETS))(fn)
    return wrap


def force_option(fn):
    return click.option("--force", is_flag=True,
                        help="Run even past the size limits `testbed check` reports "
                             "(requests, periodic events, memory).")(fn)


def report_scheduler_faults(run) -> None:
    """Name every plugin that failed and the first requests it failed on (the records
    hold them all: requests.csv's scheduler_fault column)."""
    faults = run.scheduler_faults
    if faults.empty:
        return
    for key, rows in faults.groupby("scheduler"):
        first = "; ".join(rows["scheduler_fault"].head(3))
        console.print(f"[bold yellow]scheduler {key}[/]: {len(rows)} decision(s) replaced by "
                      f"the fallback: {first}", highlight=False, soft_wrap=True)


def report_model_faults(run) -> None:
    """A network-model plugin's transfers timed by fixed-bandwidth instead: said on the
    terminal, since the table's figures are then not the model's alone."""
    per = {str(row.get("key") or row.get("scheduler")):
           float((row.get("network_model_faults") or {}).get("total") or 0.0)
           for row in run.summary.get("rows", [])}
    if any(per.values()):
        said = ", ".join(f"{n:g} ({key})" for key, n in per.items() if n)
        model = run.scenario.network.model if run.scenario is not None else "plugin"
        console.print(f"[bold yellow]network model {model}[/]: "
                      f"transfers a seed timed by fixed-bandwidth instead: {said} (it raised, "
                      "returned no finite seconds > 0, or was too slow; summary.json "
                      "network_model_faults): these figures are not the model's alone",
                      highlight=False, soft_wrap=True)


def reads_records(fn):
    """A command over finished folders: damage nobody foresaw in their records (a key
    missing, a list where a number belongs) is refused naming the folders, exit 2."""
    import functools

    from testbed.inputs import reading

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        given = [kwargs.get(k) for k in ("folder", "reference", "model")]
        given += list(kwargs.get("folders") or ())
        with reading(", ".join(str(g) for g in given if g) or "the folder given"):
            return fn(*args, **kwargs)
    return wrapper
