"""Commands across machines: provision, remote."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from testbed.cli.common import _fail, console, main


@main.command()
@click.option("--inventory", "-i", type=click.Path(dir_okay=False), default=None,
              help="Provision the hosts of this Ansible inventory (over SSH).")
@click.option("--local", "local", is_flag=True, help="Provision this machine (needs root).")
@click.option("--check", is_flag=True, help="Dry run: report what would change.")
@click.option("--dev", is_flag=True, help="Also the test suite's tools (sshd, vagrant).")
@click.option("--quiet", is_flag=True, help="Only the summary and failures.")
def provision(inventory: str | None, local: bool, check: bool, dev: bool, quiet: bool) -> None:
    """Turn machines into testbed hosts with playbooks/testbed.yml (ansible-runner).

    Installs Mininet, Open vSwitch (kernel datapath where the kernel has it), iperf3,
    ethtool, the libraries Mooncake's Transfer Engine links against, Prometheus
    (scraping the controller) and the project in its virtual environment, and starts and
    enables the services. Idempotent: a second run changes nothing. Remote hosts get
    this checkout's tracked files in /opt/netkv-testbed; they need SSH with a known host
    key and sudo. A failure names the host and task.
    """
    from testbed.remote.provision import ProvisionError
    from testbed.remote.provision import provision as run_playbook

    if bool(inventory) == local:
        _fail("give --local or --inventory FILE (one of them)")
    target = "this machine" if local else inventory
    console.print(f"provisioning {target}{' (check mode)' if check else ''}...")
    try:
        outcome = run_playbook(Path(inventory) if inventory else None, check=check, dev=dev,
                               on_line=(lambda _line: None) if quiet else click.echo)
    except ProvisionError as exc:
        _fail(str(exc))
    for host, s in sorted(outcome.stats.items()):
        click.echo(f"{host}: ok={s.get('ok', 0)} changed={s.get('changed', 0)} "
                   f"failed={s.get('failures', 0)} unreachable={s.get('dark', 0)}")
    if not outcome.ok:
        for line in outcome.failures:
            console.print(f"[bold red]failed[/] {line}", highlight=False)
        sys.exit(1)

@main.group()
def remote() -> None:
    """Other machines over SSH: run, start, stop, follow logs, collect run records.

    Hosts come from an Ansible-style YAML inventory (the one `testbed provision` uses):
    ansible_host, ansible_port, ansible_user, ansible_ssh_private_key_file, and
    netkv_known_hosts for an extra known-hosts file. Unknown host keys are refused:
    add them first (ssh-keyscan HOST >> ~/.ssh/known_hosts, after checking them).
    Commands after `--` are sent as an argument list, each argument quoted.
    """

INVENTORY = click.option("--inventory", "-i", required=True, type=click.Path(dir_okay=False),
                         help="Ansible-style YAML inventory.")

def _remote_host(inventory: str, name: str):
    from testbed.remote.inventory import InventoryError, host_of
    from testbed.remote.ssh import RemoteError, RemoteHost

    try:
        return RemoteHost(host_of(inventory, name)).connect()
    except (InventoryError, RemoteError) as exc:
        _fail(str(exc))

@remote.command("run")
@INVENTORY
@click.argument("host")
@click.argument("argv", nargs=-1, required=True)
def remote_run(inventory: str, host: str, argv: tuple[str, ...]) -> None:
    """Run ARGV on HOST, streaming its output; exit with its exit code."""
    with _remote_host(inventory, host) as h:
        rc = h.stream(list(argv), click.echo)
    sys.exit(rc)

@remote.command("start")
@INVENTORY
@click.argument("host")
@click.option("--log", "log_path", required=True, help="Remote file for the output.")
@click.argument("argv", nargs=-1, required=True)
def remote_start(inventory: str, host: str, log_path: str, argv: tuple[str, ...]) -> None:
    """Start ARGV detached on HOST (e.g. `testbed net up ... --hold 3600`); print its pid."""
    with _remote_host(inventory, host) as h:
        click.echo(h.start(list(argv), log_path))

@remote.command("stop")
@INVENTORY
@click.argument("host")
@click.argument("pid", type=int)
def remote_stop(inventory: str, host: str, pid: int) -> None:
    """SIGTERM PID on HOST (SIGKILL after 5 s): testbed parts tear down on SIGTERM."""
    with _remote_host(inventory, host) as h:
        h.stop(pid)

@remote.command("logs")
@INVENTORY
@click.argument("host")
@click.argument("path")
@click.option("--follow", "-f", is_flag=True, help="Keep streaming until Ctrl-C.")
def remote_logs(inventory: str, host: str, path: str, follow: bool) -> None:
    """Print a remote log (PATH on HOST), optionally following it as it grows."""
    with _remote_host(inventory, host) as h, contextlib.suppress(KeyboardInterrupt):
        h.follow(path, click.echo, until=lambda: not follow)

@remote.command("collect")
@INVENTORY
@click.argument("host")
@click.argument("remote_dir")
@click.option("--to", "local_dir", default="results", show_default=True,
              type=click.Path(file_okay=False), help="Local folder to copy into.")
def remote_collect(inventory: str, host: str, remote_dir: str, local_dir: str) -> None:
    """Copy a run folder from HOST into --to/<host>/<folder name>."""
    from testbed.remote.ssh import RemoteError

    target = Path(local_dir) / host / Path(remote_dir.rstrip("/")).name
    with _remote_host(inventory, host) as h:
        try:
            n = h.collect(remote_dir, target)
        except RemoteError as exc:
            _fail(str(exc))
    click.echo(f"{n} files -> {target}")

@remote.command("dask")
@INVENTORY
@click.argument("scheduler")
@click.option("--log", "log_path", default="/tmp/netkv-dask-worker.log", show_default=True,
              help="Remote file for each worker's output.")
def remote_dask(inventory: str, scheduler: str, log_path: str) -> None:
    """Start a fabric worker of the Dask SCHEDULER on every host of the inventory.

    Each host gets `sudo <netkv_project_dir>/.venv/bin/dask worker SCHEDULER --nthreads 1
    --no-nanny --resources fabric=1 --name <host>` (the project as `testbed provision` installs it;
    netkv_project_dir defaults to /opt/netkv-testbed), so `testbed emulate --dask
    SCHEDULER` and `validate --dask` run a seed per host on its own fabric. Prints
    `host pid` per line; stop one with `testbed remote stop -i INVENTORY HOST PID`.
    """
    from testbed.remote.inventory import InventoryError, load_hostvars, project_dir
    from testbed.remote.ssh import RemoteError

    try:
        hostvars = load_hostvars(inventory)
    except InventoryError as exc:
        _fail(str(exc))
    for name, hv in hostvars.items():
        folder = project_dir(hv)
        with _remote_host(inventory, name) as h:
            try:
                pid = h.start(dask_worker_argv(folder, scheduler, name), log_path)
            except RemoteError as exc:
                _fail(str(exc))
        click.echo(f"{name} {pid}")


def dask_worker_argv(project_dir: str, scheduler: str, name: str) -> list[str]:
    """A server's fabric worker: root (namespaces, OVS), one seed at a time, named; no
    nanny: a worker that dies is a server lost, whose seed Dask runs elsewhere."""
    return ["sudo", f"{project_dir}/.venv/bin/dask", "worker", scheduler, "--nthreads", "1",
            "--no-nanny", "--no-dashboard", "--resources", "fabric=1", "--name", name]
