"""What a server sends back is a packed run folder: unpacked whole, and refused when it
would write outside the run's folder or holds anything but files and folders."""

import io
import tarfile

import pytest

from testbed.emulation import servers

pytestmark = pytest.mark.serial  # servers that stop answering, waited on: runs alone


def test_a_run_folder_comes_back_whole(tmp_path):
    src = tmp_path / "src"
    (src / "logs").mkdir(parents=True)
    (src / "requests.csv").write_text("id\n1\n")
    (src / "logs" / "router.log").write_text("ok\n")
    servers.unpack(servers.pack(src), tmp_path / "dst")
    assert (tmp_path / "dst" / "requests.csv").read_text() == "id\n1\n"
    assert (tmp_path / "dst" / "logs" / "router.log").read_text() == "ok\n"


def _tar(*members: tarfile.TarInfo) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for m in members:
            tar.addfile(m, io.BytesIO(b"x" * m.size) if m.isfile() else None)
    return buf.getvalue()


@pytest.mark.parametrize("name,kind", [("../escape.txt", tarfile.REGTYPE),
                                       ("/etc/escape.txt", tarfile.REGTYPE),
                                       ("link", tarfile.SYMTYPE)])
def test_a_folder_that_reaches_outside_is_refused(tmp_path, name, kind):
    m = tarfile.TarInfo(name)
    m.type = kind
    m.size = 1 if kind == tarfile.REGTYPE else 0
    if kind == tarfile.SYMTYPE:
        m.linkname = "/etc/passwd"
    with pytest.raises(servers.ServerError, match="refused"):
        servers.unpack(_tar(m), tmp_path / "dst")
    assert not (tmp_path / "escape.txt").exists()
    assert not any((tmp_path / "dst").iterdir())


def test_no_scheduler_at_the_address_is_a_named_error_and_starts_nothing(tmp_path):
    import socket
    import subprocess
    import sys

    from tests.conftest import ROOT

    with pytest.raises(servers.ServerError, match="cannot connect"):
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        servers.ServerPool(f"tcp://127.0.0.1:{port}", connect_s=1)
    done = subprocess.run([sys.executable, "-m", "testbed", "emulate",
                           str(ROOT / "scenarios" / "default.yaml"), "--dask", "bad::",
                           "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "Dask scheduler bad::" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_remote_dask_starts_a_named_root_fabric_worker_per_host(tmp_path):
    import subprocess
    import sys

    from testbed.cli.machines import dask_worker_argv
    from tests.conftest import ROOT

    argv = dask_worker_argv("/opt/p", "tcp://10.0.0.1:8786", "node1")
    assert argv[:4] == ["sudo", "/opt/p/.venv/bin/dask", "worker", "tcp://10.0.0.1:8786"]
    assert argv[argv.index("--resources") + 1] == "fabric=1"
    assert argv[argv.index("--name") + 1] == "node1" and "--no-nanny" in argv
    done = subprocess.run([sys.executable, "-m", "testbed", "remote", "dask", "-i",
                           str(tmp_path / "none.yml"), "tcp://127.0.0.1:1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "inventory not found" in done.stderr, done.stderr


def test_a_run_whose_every_server_is_lost_ends_with_a_named_error(tmp_path, monkeypatch):
    """A real Dask scheduler and one fabric worker; the worker is SIGKILLed while its seed
    runs and nothing takes its place: the run gives up after `alone_s` with the cause named,
    instead of waiting (as Dask would) for a worker that never comes; between rounds one that
    comes back is waited for."""
    import os
    import signal
    import threading
    import time

    from testbed.scenario import load_scenario
    from tests import dask_local
    from tests.conftest import ROOT

    started = tmp_path / "started"
    sched, address = dask_local.scheduler(tmp_path)
    procs = [sched]

    def seed_that_runs_long(job, trace):  # a closure: sent by value, run on the worker
        started.write_text(str(os.getpid()))
        time.sleep(600)

    monkeypatch.setattr(servers, "run_seed", seed_that_runs_long)
    try:
        procs.append(dask_local.fabric_worker(address, "only"))

        def lose_the_server():
            while not started.exists() and procs[1].poll() is None:
                time.sleep(0.1)
            procs[1].send_signal(signal.SIGKILL)

        killer = threading.Thread(target=lose_the_server, daemon=True)
        cell = load_scenario(ROOT / "scenarios" / "default.yaml")
        with servers.ServerPool(address, alone_s=3) as pool:
            assert pool.servers() == ["only"]
            killer.start()
            # 60 s a seed: a pool that waited for a worker would end after 180 s, with the
            # other message
            with pytest.raises(servers.ServerError,
                               match=r"has offered a fabric for 3 s and seed\(s\) \[7\] "
                                     r"are unfinished: every server was lost"):
                list(pool.run(cell, [{"seed": 7, "runs": [], "timeout_s": 60}], 60))
            assert started.read_text() == str(procs[1].pid)  # it ran there, and was lost
            # between rounds a server that comes back is waited for, none is an error
            with pytest.raises(servers.ServerError, match="no worker offers a fabric after 1 s"):
                pool.wait_for_servers(1)
            procs.append(dask_local.fabric_worker(address, "back"))
            assert pool.wait_for_servers(120) == ["back"]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=30)
