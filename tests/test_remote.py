"""SSH to a real OpenSSH server on loopback: commands, logs, files, and refusals."""

from __future__ import annotations

import pytest

from testbed.remote.ssh import HostSpec, RemoteError, RemoteHost
from tests.sshd import keygen, sshd_missing, start_sshd

pytestmark = pytest.mark.skipif(sshd_missing() is not None, reason=str(sshd_missing()))


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


def spec(sshd, **over) -> HostSpec:
    base = dict(name="peer", host="127.0.0.1", port=sshd.port, user=sshd.user,
                key_file=str(sshd.client_key), known_hosts=str(sshd.known_hosts))
    return HostSpec(**{**base, **over})


def test_a_command_runs_with_its_arguments_quoted(sshd):
    with RemoteHost(spec(sshd)) as host:
        out = host.run(["printf", "%s|", "two words", "$HOME", "; rm -rf /nope"]).out
        assert out == "two words|$HOME|; rm -rf /nope|"  # arguments, never shell syntax
        with pytest.raises(RemoteError, match="exited 3"):
            host.run(["sh", "-c", "exit 3"])


def test_a_started_process_log_streams_back_and_it_stops(sshd, tmp_path):
    log = str(tmp_path / "worker.log")
    with RemoteHost(spec(sshd)) as host:
        pid = host.start(["sh", "-c", "for i in 1 2 3; do echo line $i; done; sleep 60"], log)
        lines: list[str] = []
        host.follow(log, lines.append, until=lambda: len(lines) >= 3)
        assert lines[:3] == ["line 1", "line 2", "line 3"]
        streamed: list[str] = []
        assert host.stream(["sh", "-c", "echo out; echo err >&2; exit 4"], streamed.append) == 4
        assert sorted(streamed) == ["err", "out"]
        host.stop(pid)
        assert host.run(["kill", "-0", str(pid)], check=False).rc != 0


def test_run_records_are_collected(sshd, tmp_path):
    remote = tmp_path / "remote-run"
    (remote / "cells" / "a").mkdir(parents=True)
    (remote / "summary.json").write_text("{}")
    (remote / "cells" / "a" / "requests.csv").write_text("id\n")
    with RemoteHost(spec(sshd)) as host:
        assert host.collect(str(remote), tmp_path / "here") == 2
    assert (tmp_path / "here" / "cells" / "a" / "requests.csv").read_text() == "id\n"


def test_an_unknown_host_key_is_refused(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(RemoteError, match="unknown host key, refused"):
        RemoteHost(spec(sshd, known_hosts=str(empty))).connect()


def test_a_wrong_client_key_is_refused(sshd, tmp_path):
    stranger = keygen(tmp_path / "stranger")
    with pytest.raises(RemoteError, match="authentication failed"):
        RemoteHost(spec(sshd, key_file=str(stranger))).connect()


def test_the_cli_reaches_hosts_through_an_inventory(sshd, tmp_path):
    import yaml
    from click.testing import CliRunner

    from testbed.cli import main

    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_user": sshd.user, "netkv_known_hosts": str(sshd.known_hosts)},
        "hosts": {"peer": {"ansible_host": "127.0.0.1", "ansible_port": sshd.port,
                           "ansible_ssh_private_key_file": str(sshd.client_key)}}}}))
    result = CliRunner().invoke(main, ["remote", "run", "-i", str(inv), "peer", "--",
                                       "echo", "hello there"])
    assert result.exit_code == 0 and result.output == "hello there\n"
    result = CliRunner().invoke(main, ["remote", "run", "-i", str(inv), "nobody", "--", "true"])
    assert result.exit_code == 2 and "no host 'nobody'" in " ".join(result.output.split())
