"""Switch counters from every server of a cluster run: the `tc serve` loop, one server's
reader through a real OpenSSH server on loopback (no root: netlink counter dumps are
unprivileged), and the merge that asks this machine first, then each server."""

from __future__ import annotations

import io
import json

import pytest

from testbed.datapath import tc
from testbed.remote import counters
from testbed.remote.counters import ClusterCounters, CounterServer
from testbed.remote.ssh import HostSpec
from tests.conftest import ROOT
from tests.sshd import sshd_missing, start_sshd


def test_serve_answers_each_request_with_the_interfaces_this_machine_has():
    out = io.StringIO()
    tc.serve_counters(['{"names": ["lo", "netkv-nosuch0"]}\n', "\n",
                       '{"names": ["netkv-nosuch0"], "link": true}\n'], out.write)
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert set(first) == {"lo"} and second == {}


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    if sshd_missing():
        pytest.skip(sshd_missing())
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


def _spec(sshd) -> HostSpec:
    return HostSpec(name="peer", host="127.0.0.1", port=sshd.port, user=sshd.user,
                    key_file=str(sshd.client_key), known_hosts=str(sshd.known_hosts))


def test_a_server_is_read_over_one_ssh_session(sshd):
    server = CounterServer(_spec(sshd), str(ROOT))
    try:
        first = server.read(["lo", "netkv-nosuch0"], include_link=True, levels=False)
        channel = server._channel
        second = server.read(["lo"], include_link=False, levels=False)
        assert set(first) == {"lo"} and set(second) == {"lo"}
        assert server._channel is channel and server.errors == 0  # the same session
    finally:
        server.close()


def test_a_slow_server_is_waited_for_once_then_read_with_the_usual_timeout(sshd, tmp_path):
    """A server whose Python takes longer to start than the read timeout (a software-
    emulated VM) is still read: the first answer has FIRST_ANSWER_S."""
    import sys

    project = tmp_path / "slow"
    (project / ".venv" / "bin").mkdir(parents=True)
    python = project / ".venv" / "bin" / "python"
    python.write_text(f"#!/bin/sh\nsleep 2\ncd {ROOT}\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    server = CounterServer(_spec(sshd), str(project), timeout_s=0.5)
    try:
        assert set(server.read(["lo"], False, False)) == {"lo"} and server.errors == 0
        assert server._channel.gettimeout() == 0.5  # later answers: the usual timeout
    finally:
        server.close()


def test_a_server_that_cannot_answer_is_absent_not_fatal(sshd, monkeypatch):
    server = CounterServer(_spec(sshd), "/nonexistent/netkv")
    assert server.read(["lo"], False, False) == {} and server.errors == 1
    assert server.read(["lo"], False, False) == {} and server.errors == 1  # not retried yet
    monkeypatch.setattr(counters, "RETRY_S", 0.0)
    assert server.read(["lo"], False, False) == {} and server.errors == 2  # asked again


class FakeServer:
    def __init__(self, has: dict):
        self.has, self.asked = has, []

    def read(self, names, include_link, levels):
        self.asked.append(list(names))
        return {n: self.has[n] for n in names if n in self.has}

    def close(self):
        pass


def test_each_server_is_asked_only_for_what_is_still_missing(monkeypatch):
    # this machine's own interfaces are faked too: a leftover agg1-eth3 here must not decide it
    monkeypatch.setattr(tc, "all_counters", lambda names, **kw: {
        n: {"kv": {"bytes": 0}} for n in names if n == "lo"})
    a = FakeServer({"tor2-eth1": {"kv": {"bytes": 1}}, "lo": {"kv": {"bytes": -1}}})
    b = FakeServer({"agg1-eth3": {"kv": {"bytes": 2}}})
    read = ClusterCounters([a, b])
    got = read(["lo", "tor2-eth1", "agg1-eth3", "core0-eth1"])
    assert got["lo"] == {"kv": {"bytes": 0}}  # this machine's own lo came first
    assert got["tor2-eth1"] == {"kv": {"bytes": 1}} and got["agg1-eth3"] == {"kv": {"bytes": 2}}
    assert a.asked == [["tor2-eth1", "agg1-eth3", "core0-eth1"]]
    assert b.asked == [["agg1-eth3", "core0-eth1"]] and "core0-eth1" not in got
