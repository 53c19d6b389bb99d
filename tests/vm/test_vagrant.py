"""`vagrant up` for real: two VMs from the local box, provisioned by the playbook
(ansible_local), the flow model and a packet-level run inside, the oracle and Prometheus
reached from this machine through the forwarded ports, the fabric tests on the kernel
datapath inside a VM, `testbed remote` with strict host keys, and one fabric spread over
both VMs. Every VM and network is destroyed at the end, and the test checks it.

The VMs run under software emulation here (this host's nested KVM cannot boot a Debian
kernel: `testbed vm box` measures it), so every figure inside them is CPU-bound."""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from testbed.vm.vagrant import Vagrant, VagrantError
from tests.conftest import ROOT

pytestmark = [pytest.mark.vm, pytest.mark.root, pytest.mark.slow]

NET = "192.168.58"  # the VMs' host-only network (the Vagrantfile's NETKV_VM_NET)
VM1_IP, VM2_IP = f"{NET}.11", f"{NET}.12"
# a VM under software emulation forwards packets at a fraction of this machine's rate:
# the fabric tests inside run every link at a quarter of the usual rates, waits x4
SLOW_MACHINE = "NETKV_TEST_SCALE=5e-5 NETKV_TEST_SLOWDOWN=4"
# each VM's serial console, kept while the VMs live: a guest that stops answering says why
CONSOLES = Path("/var/log/libvirt/qemu")
SMALL_FABRIC = ("--set cluster.gpus_per_server=4 --set cluster.aggs_per_pod=2 "
                "--set cluster.cores_per_agg=1 --set emulation.scale=5e-5")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _virsh(*args: str) -> set[str]:
    out = subprocess.run(["virsh", "--connect", "qemu:///system", *args, "--name"],
                         capture_output=True, text=True, check=True).stdout
    return {line.strip() for line in out.splitlines() if line.strip()}


def _checkout(dest: Path) -> Path:
    """A clean copy of this working tree (tracked and new files, nothing ignored): what
    a fresh clone holds, without the developer's .venv, results or .vagrant."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], cwd=ROOT, capture_output=True,
                           check=True).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / name.decode()
        if src.is_file():
            (dest / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name.decode())
    return dest


def _alive(pid: int) -> bool:
    try:
        return b"pytest" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _remove_stale_vms() -> list[str]:
    """Remove the VMs (and their disks) of an earlier session of these tests that was
    killed before it could destroy them (a CI run stopped at its time limit): a domain
    named after a test process that no longer runs. Returns their names."""
    stale = [d for d in _virsh("list", "--all")
             if (m := re.search(r"netkv-t(\d+)-\d+$", d)) and not _alive(int(m[1]))]
    for domain in stale:
        virsh = ["virsh", "--connect", "qemu:///system"]
        subprocess.run([*virsh, "destroy", domain], capture_output=True)  # if running
        subprocess.run([*virsh, "undefine", domain, "--remove-all-storage"],
                       capture_output=True, check=True)
    return stale


@pytest.fixture(scope="module")
def vms(vm_box, tmp_path_factory):
    """Two VMs (vagrant up, both provisioned), destroyed afterwards."""
    stale = _remove_stale_vms()
    if stale:
        print(f"removed VMs a killed test session left: {', '.join(sorted(stale))}")
    folder = _checkout(tmp_path_factory.mktemp("checkout"))
    ports = {"PROMETHEUS": _free_port(), "ORACLE": _free_port(), "METRICS": _free_port()}
    name = f"netkv-t{os.getpid()}"
    names = [f"{name}-1", f"{name}-2"]
    vagrant = Vagrant(folder, {"NETKV_VM_NAME": name, "NETKV_VM_COUNT": "2",
                               "NETKV_VM_NET": NET, "NETKV_VM_CPUS": "2",
                               "NETKV_VM_MEMORY": "3072",
                               "NETKV_VM_CONSOLE_LOG": str(CONSOLES),
                               **{f"NETKV_PORT_{k}": str(v) for k, v in ports.items()}})
    domains, networks = _virsh("list", "--all"), _virsh("net-list", "--all")
    started = time.monotonic()
    try:
        output = vagrant.up(on_line=lambda line: print(
            f"[{time.monotonic() - started:4.0f} s] {line}", flush=True)
            if "Progress" not in line else None)
        print(f"vagrant up (2 VMs, provisioned): {time.monotonic() - started:.0f} s")
        yield vagrant, names, ports, output
    finally:
        vagrant.destroy()
        for vm in names:
            _console(vm).unlink(missing_ok=True)
        # vagrant-libvirt keeps its management network for other projects' VMs; the
        # private network it made for ours goes with the last VM on it
        assert _virsh("list", "--all") == domains
        left = _virsh("net-list", "--all") - networks - {"vagrant-libvirt"}
        assert not left, f"networks left behind: {left}"


def test_vagrant_up_provisions_both_vms_with_the_playbook(vms):
    vagrant, names, _, output = vms
    recaps = [line for line in output.splitlines() if "ok=" in line and "failed=" in line]
    assert len(recaps) == 2, recaps
    assert all("failed=0" in r and "unreachable=0" in r for r in recaps), recaps
    for name in names:
        # systemctl as root: the box has no D-Bus for an unprivileged client
        shown = vagrant.ssh(name, "sudo systemctl is-active openvswitch-switch prometheus; "
                                  "lsmod | grep -c ^openvswitch; "
                                  "/vagrant/.venv/bin/testbed --help | head -1").splitlines()
        assert shown[-4:-1] == ["active", "active", "1"] and "Usage:" in shown[-1], shown


def test_the_flow_model_runs_inside_the_vm(vms):
    vagrant, names, _, _ = vms
    out = vagrant.ssh(names[0], "cd /vagrant && .venv/bin/testbed simulate "
                                "scenarios/default.yaml --seeds 1 --set workload.warmup_s=1 "
                                "--set workload.measure_s=4 "
                                "--out /tmp/results")
    assert "netkv-full" in out.lower(), out


def test_a_packet_run_in_the_vm_serves_the_oracle_and_prometheus_to_the_host(vms):
    vagrant, names, ports, _ = vms
    token = secrets.token_hex(16)
    # its own session (setsid): nothing of the SSH session's end may reach it
    # the fabric tests' small fat-tree (8 hosts, 10 switches): the paper's 20 switches
    # did not come up within 10 minutes under software emulation
    vagrant.ssh(names[0], "cd /vagrant && sudo sh -c 'setsid nohup .venv/bin/testbed net up "
                f"scenarios/default.yaml {SMALL_FABRIC} --hold 240 --set emulation.bind=0.0.0.0 "
                f"--set emulation.token={token} --set emulation.datapath=kernel "
                "--out /tmp/results > /tmp/net.log 2>&1 < /dev/null &'")
    try:
        deadline = time.monotonic() + 600
        while "READY" not in vagrant.ssh(names[0], "cat /tmp/net.log"):
            assert time.monotonic() < deadline, vagrant.ssh(names[0], "cat /tmp/net.log")
            time.sleep(5)
        assert "datapath kernel" in vagrant.ssh(names[0], "cat /tmp/net.log")
        req = urllib.request.Request(f"http://127.0.0.1:{ports['ORACLE']}/oracle",
                                     headers={"Authorization": f"Bearer {token}"})
        # a software-emulated VM under both VMs' load can take seconds to answer: asked
        # again until a deadline, each failure kept for the message
        deadline, tries = time.monotonic() + 120, []
        while True:
            try:
                with urllib.request.urlopen(req, timeout=20) as resp:
                    oracle = json.loads(resp.read())
                break
            except OSError as e:
                tries.append(repr(e))
                assert time.monotonic() < deadline, tries
                time.sleep(3)
        assert {"1", "2", "3"} <= set(oracle["congestion"]), oracle
        query = f"http://127.0.0.1:{ports['PROMETHEUS']}/api/v1/query?query=netkv_tier_congestion"
        deadline = time.monotonic() + 120
        while True:
            with urllib.request.urlopen(query, timeout=20) as resp:
                result = json.loads(resp.read())["data"]["result"]
            if result or time.monotonic() > deadline:
                break
            time.sleep(3)
        assert {r["metric"]["tier"] for r in result} >= {"1", "2", "3"}, result
    finally:  # killed, not stopped: what it leaves on the kernel datapath, clean removes
        vagrant.ssh(names[0], "sudo pkill -KILL -f '[t]estbed net up' || true")
    clean = "sudo /vagrant/.venv/bin/testbed clean"
    assert "nothing to clean" not in vagrant.ssh(names[0], f"{clean} --dry-run")
    assert "cleaned" in vagrant.ssh(names[0], clean)
    assert vagrant.ssh(names[0], f"{clean} --dry-run; sudo ip netns list").strip() == \
        "nothing to clean"


# what a guest kernel prints when it stopped making progress: software emulation has
# livelocked one in its network receive path (a soft lockup that never ended). A CPU
# stuck a minute, not the first report at ~25 s, which a guest starved of the host's
# cores can print and outlive.
STOPPED_KERNEL = re.compile(r"soft lockup - CPU#\d+ stuck for (?:[6-9]\d|\d{3,})s|Kernel panic")


class _Lockups:
    """Reads the VMs' serial consoles from now on for a guest kernel that stopped."""

    def __init__(self, names: list[str]):
        self.offsets = {n: _console(n).stat().st_size if _console(n).exists() else 0
                        for n in names}

    def stopped(self) -> dict[str, str]:
        """Each VM whose kernel stopped since, with what it printed."""
        found = {}
        for name, offset in self.offsets.items():
            if _console(name).exists():
                with _console(name).open(errors="replace") as f:
                    f.seek(offset)
                    if m := STOPPED_KERNEL.search(f.read()):
                        found[name] = m[0]
        return found

    def __call__(self) -> str | None:
        """The watchdog's question: a reason to stop the command, or None."""
        return "; ".join(f"{n}'s kernel printed '{why}'"
                         for n, why in self.stopped().items()) or None


def _inside(vagrant: Vagrant, names: list[str], command: str, timeout: float = 1200) -> str:
    """Run a command in the first VM's checkout as root; the output is printed (the
    test's log) and returned, and a non-zero exit fails with an inner pytest's failure
    lines first (a CI log keeps only a part of a long failure), then its last lines.

    A guest kernel that stops (the consoles say so) ends the command at once; the VMs
    whose kernel stopped are reset, what the command left is cleaned, and it runs once
    more (said in the log): that livelock is the emulator's, not the testbed's."""
    lockups = _Lockups(names)
    lines: list[str] = []
    try:
        return _printing(vagrant, names[0], f"cd /vagrant && sudo {command}", timeout,
                         lockups, lines)
    except VagrantError as exc:
        if not (stopped := lockups.stopped()):
            raise _failure(names, lines, exc) from None
        print(f"{lockups()}: resetting and running the command once more\n"
              + _consoles(names), flush=True)
        _reset(vagrant, names, list(stopped))
    lockups, lines = _Lockups(names), []
    try:
        return _printing(vagrant, names[0], f"cd /vagrant && sudo {command}", timeout,
                         lockups, lines)
    except VagrantError as exc:
        raise _failure(names, lines, exc) from None


def _printing(vagrant: Vagrant, name: str, command: str, timeout: float,
              lockups: _Lockups, lines: list[str]) -> str:
    def seen(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    return vagrant.ssh(name, command, timeout=timeout, on_line=seen, abort=lockups)


def _failure(names: list[str], lines: list[str], exc: VagrantError) -> AssertionError:
    why = [ln for ln in lines if ln.startswith(("E ", "FAILED", "ERROR"))][:40]
    return AssertionError("\n".join(["inside the VM:", *why, str(exc), _consoles(names)]))


def _reset(vagrant: Vagrant, names: list[str], stopped: list[str]) -> None:
    """Hard-reset the VMs whose kernel stopped, wait for their SSH, then stop what the
    interrupted command left running on every VM and clean its fabric."""
    domains = _virsh("list", "--all")
    for name in stopped:
        (domain,) = [d for d in domains if d.endswith(name)]
        subprocess.run(["virsh", "--connect", "qemu:///system", "reset", domain],
                       check=True, capture_output=True)
    for name in names:
        deadline = time.monotonic() + 600
        while True:
            try:
                vagrant.ssh(name, "true", timeout=60)
                break
            except VagrantError:
                assert time.monotonic() < deadline, f"{name} did not come back\n" \
                    + _consoles(names)
        vagrant.ssh(name, "sudo pkill -TERM -f '[p]ytest'; timeout 60 sh -c "
                          "'while pgrep -f [p]ytest >/dev/null; do sleep 1; done'; "
                          "sudo pkill -KILL -f '[p]ytest'; "
                          "sudo /vagrant/.venv/bin/testbed clean > /dev/null; true")


def test_the_fabric_tests_pass_on_the_kernel_datapath_inside_the_vm(vms):
    vagrant, names, _, _ = vms
    out = _inside(vagrant, names, f"{SLOW_MACHINE} NETKV_TEST_DATAPATH=kernel CI=true "
                  ".venv/bin/python -m pytest -q -p no:cacheprovider --durations=0 "
                  "tests/emulation/test_fabric.py "
                  # what the kernel datapath must show (datapath, reachability, the
                  # shaped rate through every tier's links, routes and queues, ECMP,
                  # DSCP on the wire, link down): one stream across pods crosses tier 1,
                  # 2 and 3 links and holds the slowest's rate; the tiers one by one are
                  # tc's on the userspace datapath too (the host suite); the fairness and
                  # congestion figures are CPU-bound under software emulation; the
                  # oracle, Prometheus and `testbed clean` after SIGKILL are the packet
                  # run's (its own fabric: one fabric fewer to build here); signals,
                  # crashes while starting and descriptors take the datapath-independent
                  # paths the host suite runs
                  "-k 'not two-ovs-daemons and not chromium and not fairly and not "
                  "congestion_rises and not oracle_serves and not prometheus and not "
                  "(bottleneck and (i1 or i2))'")
    assert " passed" in out and " failed" not in out, out
    left = vagrant.ssh(names[0], "sudo /vagrant/.venv/bin/testbed clean --dry-run")
    assert left.strip() == "nothing to clean", left  # the fabrics' teardowns left nothing


@pytest.fixture(scope="module")
def inventory(vms, tmp_path_factory):
    """An inventory of both VMs for `testbed remote`, with their host keys (learned
    through Vagrant's authenticated channel) in its known-hosts file."""
    vagrant, names, _, _ = vms
    tmp = tmp_path_factory.mktemp("remote")
    known = tmp / "known_hosts"
    known.write_text("".join(f"{ip} {vagrant.host_key(n)}\n"
                             for n, ip in zip(names, (VM1_IP, VM2_IP), strict=True)))
    hosts = {}
    for label, n, ip in (("vm1", names[0], VM1_IP), ("vm2", names[1], VM2_IP)):
        key = vagrant.folder / ".vagrant" / "machines" / n / "libvirt" / "private_key"
        hosts[label] = {"ansible_host": ip, "ansible_user": "vagrant",
                        "ansible_ssh_private_key_file": str(key)}
    inv = tmp / "hosts.yml"
    inv.write_text(json.dumps({"all": {"vars": {"netkv_known_hosts": str(known),
                                                "netkv_project_dir": "/vagrant"},
                                       "hosts": hosts}}))
    stranger = tmp / "unknown.yml"  # the same hosts, no known-hosts file
    stranger.write_text(json.dumps({"all": {"hosts": hosts}}))
    return inv, stranger


def _testbed(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / ".venv" / "bin" / "testbed"), *args],
                          capture_output=True, text=True, timeout=600)


def test_testbed_remote_runs_and_collects_on_the_vms_with_strict_host_keys(inventory, tmp_path):
    inv, stranger = inventory
    refused = _testbed("remote", "run", "-i", str(stranger), "vm1", "--", "true")
    assert refused.returncode != 0 and "host key" in refused.stderr.lower(), refused.stderr
    for host in ("vm1", "vm2"):
        done = _testbed("remote", "run", "-i", str(inv), host, "--", "sh", "-c",
                        "lsmod | grep -c ^openvswitch; exit 3")
        assert done.returncode == 3 and done.stdout.strip() == "1", (done.stdout, done.stderr)
    made = _testbed("remote", "run", "-i", str(inv), "vm2", "--", "sh", "-c",
                    "mkdir -p /tmp/netkv-run/sub && echo hello > /tmp/netkv-run/sub/a.txt")
    assert made.returncode == 0, made.stderr
    got = _testbed("remote", "collect", "-i", str(inv), "vm2", "/tmp/netkv-run",
                   "--to", str(tmp_path))
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "vm2" / "netkv-run" / "sub" / "a.txt").read_text() == "hello\n"


def _trust_vm2_from_vm1(vagrant: Vagrant, names: list[str]) -> None:
    """VM1 reaches VM2 as vagrant with keys of its own and VM2's known host key: as the
    vagrant user (Mininet runs `sudo -u vagrant ssh`) and as root (the remote layer's
    paramiko in the controller and the fidelity monitor). Three SSH sessions, not one per
    step: each costs seconds under software emulation."""
    key = vagrant.host_key(names[1])
    homes = ("/root", "/home/vagrant")
    made = vagrant.ssh(names[0], " && ".join(
        f"(sudo test -f {h}/.ssh/id_ed25519 || sudo -u {'root' if h == '/root' else 'vagrant'}"
        f" ssh-keygen -q -t ed25519 -N '' -f {h}/.ssh/id_ed25519) && "
        f"sudo cat {h}/.ssh/id_ed25519.pub" for h in homes))
    public = [line for line in made.splitlines() if line.startswith("ssh-ed25519 ")]
    assert len(public) == 2, made
    vagrant.ssh(names[1], f"printf '%s\\n' {shlex.join(public)} >> ~/.ssh/authorized_keys")
    vagrant.ssh(names[0], " && ".join(  # each file its owner's (tee as root or vagrant)
        f"echo '{VM2_IP} {key}' | {'sudo ' if h == '/root' else ''}tee -a "
        f"{h}/.ssh/known_hosts >/dev/null" for h in homes))


def test_one_fabric_and_one_emulated_run_spread_over_both_vms(vms):
    """Mininet's cluster edition from the first VM (its controller there), a pod on each
    VM, joined by GRE over the private network: pingall and a shaped stream across, then
    an emulated run on the same fabric with workers on both VMs, its KV through
    Mooncake's Transfer Engine (the host suite runs the cluster path with the pusher)."""
    vagrant, names, _, _ = vms
    _trust_vm2_from_vm1(vagrant, names)
    vagrant.ssh(names[0], "printf 'all:\\n  vars: {netkv_project_dir: /vagrant}\\n  hosts:\\n"
                          "    localhost: {ansible_connection: local}\\n"
                          f"    vm2: {{ansible_host: {VM2_IP}, ansible_user: vagrant}}\\n'"
                          " > /tmp/cluster.yml")
    out = _inside(vagrant, names, f"{SLOW_MACHINE} NETKV_TEST_CLUSTER=/tmp/cluster.yml "
                  "NETKV_TEST_TUNNEL=gre NETKV_TEST_KV_TRANSPORT=mooncake "
                  f"NETKV_TEST_BIND={VM1_IP} CI=true .venv/bin/python -m pytest -q -s "
                  "-p no:cacheprovider --durations=0 tests/emulation/test_cluster.py")
    assert "1 passed" in out and "failed" not in out, out
    assert "through localhost+vm2" in out, out  # every path of the stream crossed servers


@pytest.mark.skipif(os.environ.get("NETKV_VM_BENCH") != "1",
                    reason="a benchmark, not a check: NETKV_VM_BENCH=1 runs "
                           "benchmarks/bench_fabric.py inside the first VM (about 10 minutes)")
def test_bench_fabric_compares_the_kernel_and_userspace_datapaths_inside_the_vm(vms):
    """Figures for docs/benchmarks.md, printed to the test's output; the test checks only
    that both datapaths were measured and that the figures say they are CPU-bound."""
    vagrant, names, _, _ = vms
    out = _inside(vagrant, names, ".venv/bin/python benchmarks/bench_fabric.py "
                  "--small --scales 1e-4,2e-4,5e-4 --seconds 6 --ovs-instances 1 "
                  "--only throughput")
    assert "datapath user" in out and "datapath kernel" in out, out
    assert "CPU-bound" in out, out


def _console(name: str) -> Path:
    """Where the Vagrantfile keeps a VM's serial console (NETKV_VM_CONSOLE_LOG)."""
    return CONSOLES / f"{name}-console.log"


def _consoles(names: list[str], lines: int = 25) -> str:
    """The last lines of each VM's serial console: what a failure message carries."""
    out = []
    for name in names:
        path = _console(name)
        text = path.read_text(errors="replace") if path.exists() else "(no console log)"
        out.append(f"--- {name}'s console, last {lines} lines:\n"
                   + "\n".join(text.splitlines()[-lines:]))
    return "\n".join(out)


def _host_address() -> str:
    """This machine's address on the VMs' private network (libvirt gives it the .1)."""
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        addr = line.split()[3].split("/")[0]
        if addr.startswith(NET + "."):
            return addr
    raise AssertionError(f"no address of this machine on {NET}.0/24:\n{out}")


def test_a_seed_runs_on_a_vm_through_dask_and_a_lost_vm_costs_nothing(
        vms, inventory, tmp_path):
    """A Dask scheduler here, a fabric worker on each VM of the inventory (`testbed
    remote dask`); `testbed emulate --dask` hands its seed to one of them, which builds
    its own fabric there; that VM's worker is killed while the seed runs, and the seed
    runs again on the other VM: the run comes back, with its folder. Its KV goes through
    Mooncake's Transfer Engine, from each VM's own environment. (One seed, not one
    per VM: the second would only run after the first on the surviving VM, minutes of
    software emulation that show nothing more; the host suite spreads seeds over
    servers, tests/emulation/test_servers.py.)"""
    vagrant, names, _, _ = vms
    inv, _ = inventory
    host = _host_address()
    port = _free_port()
    sched = subprocess.Popen([str(ROOT / ".venv" / "bin" / "dask"), "scheduler", "--host",
                              host, "--port", str(port), "--no-dashboard"],
                             stdout=(tmp_path / "scheduler.log").open("w"),
                             stderr=subprocess.STDOUT, start_new_session=True)
    address = f"tcp://{host}:{port}"
    labels = dict(zip(names, ("vm1", "vm2"), strict=True))
    try:
        started = _testbed("remote", "dask", "-i", str(inv), address)
        assert started.returncode == 0, started.stderr
        assert sorted(line.split()[0] for line in started.stdout.splitlines()) == \
            ["vm1", "vm2"], started.stdout
        deadline = time.monotonic() + 300  # both servers in before the run: either may lose
        while (tmp_path / "scheduler.log").read_text().count("Register worker") < 2:
            assert time.monotonic() < deadline, (tmp_path / "scheduler.log").read_text()
            time.sleep(1)
        scenario = ROOT / "scenarios" / "default.yaml"
        # the shortest run that still shows the re-run: 1.5 modelled seconds of arrivals
        run = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "testbed"), "emulate", str(scenario), "--seeds", "1",
             *SMALL_FABRIC.split(), "--set", "schedulers=[rr]", "--set",
             "workload.warmup_s=0.5", "--set", "workload.measure_s=1", "--set",
             "emulation.start_timeout_s=480", "--set", "emulation.kv_transport=mooncake",
             "--out", str(tmp_path / "results"),
             "--dask", address, "--quiet"],
            cwd=ROOT, stdout=(tmp_path / "emulate.log").open("w"), stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 900
            lost = None
            while lost is None:
                assert run.poll() is None, (tmp_path / "emulate.log").read_text()[-3000:] \
                    + _consoles(names)
                assert time.monotonic() < deadline, "no VM started the seed\n" + _consoles(names)
                lost = next((n for n in names if "netkv-lane" in vagrant.ssh(
                    n, "ls /run/netns 2>/dev/null; true")), None)
                if lost is None:
                    time.sleep(5)
            vagrant.ssh(lost, "sudo pkill -KILL -f '[d]ask worker'")
            assert run.wait(timeout=1800) == 0, (tmp_path / "emulate.log").read_text()[-3000:] \
                + _consoles(names)
        finally:
            if run.poll() is None:
                run.kill()
    finally:
        for name in names:
            vagrant.ssh(name, "sudo pkill -TERM -f '[d]ask worker'; sudo /vagrant/.venv/bin/"
                              "testbed clean > /dev/null; true")
        sched.terminate()
        sched.wait(timeout=60)
    (folder,) = (tmp_path / "results").glob("*-emulation-*")
    runs = json.loads((folder / "fidelity.json").read_text())["runs"]
    assert len(runs) == 1, runs  # none lost
    survivor = labels[names[1] if lost == names[0] else names[0]]
    assert runs[0]["server"] == survivor, (runs, labels[lost])  # ran again on the other
    cell = folder / runs[0]["cell"]
    assert (cell / "requests.csv").read_text().count("\n") > 1
    assert (cell / "logs" / "router.log").exists()
    assert not (folder / "PARTIAL").exists()
