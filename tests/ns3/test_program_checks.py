"""The ns-3 program as a child: one that is not this project's program, never answers,
dies or prints garbage is refused by name before any folder is made; one that keeps
saying it works ("beat") is never stopped; a relative $NETKV_NS3_PROGRAM still runs."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from testbed.cli import main
from testbed.ns3sim import process
from testbed.ns3sim.process import Ns3Error, Ns3Process, check_program
from testbed.ns3sim.program import PREBUILT, Ns3Unavailable, checked_program, program_path
from tests.conftest import ROOT


def _script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\nimport sys, time\n{body}\n")
    path.chmod(0o755)
    return path


SILENT = "sys.stdin.read()"  # reads its input, answers nothing: `cat` without the echo
GARBAGE = "print('hello world', flush=True); print('end', flush=True); sys.stdin.read()"
EXITS = "sys.exit(1)"
ECHOES = "for line in sys.stdin:\n    print(line.strip(), flush=True)"  # /bin/cat
FLOODS = "while True:\n    print('y')"  # /usr/bin/yes
BEATS = """
for line in sys.stdin:
    if line.startswith('hello'):
        print('kvnet 1'); print('end', flush=True)
    elif line.startswith('run'):
        for _ in range(8):
            time.sleep(0.25); print('beat', flush=True)
        print('at 5'); print('end', flush=True)
    elif line.startswith('stall'):
        time.sleep(3); print('end', flush=True)
"""


@pytest.mark.parametrize("body, said", [
    (SILENT, "did not answer within"), (GARBAGE, "it answered 'hello world'"),
    (EXITS, "exited (1)"), (ECHOES, "it answered 'hello'"), (FLOODS, "it answered 'y'"),
])
def test_a_program_that_is_not_the_ns3_program_is_refused_by_name(tmp_path, monkeypatch,
                                                                  body, said):
    monkeypatch.setenv(process.START_ENV, "2")
    fake = _script(tmp_path, "fake", body)
    t0 = time.monotonic()
    with pytest.raises(Ns3Error, match="not the netkv ns-3 program") as err:
        check_program(fake)
    assert said in str(err.value) and str(fake) in str(err.value)
    assert time.monotonic() - t0 < 10


def test_a_long_command_that_beats_is_waited_for_and_a_silent_one_is_stopped(tmp_path,
                                                                             monkeypatch):
    monkeypatch.setenv(process.PROGRESS_ENV, "1")
    proc = Ns3Process(_script(tmp_path, "beating", BEATS))
    try:
        proc.hello()
        assert proc.ask("run 5") == ["at 5"]  # 2 s of work, a beat every 0.25 s
        with pytest.raises(Ns3Error, match=r"stopped answering: no line in 1 s \(\$NETKV"):
            proc.ask("stall")
    finally:
        proc.close()


@pytest.mark.parametrize("value", ["0", "nan", "-3", "abc"])
def test_a_deadline_that_is_no_number_of_seconds_is_refused(tmp_path, monkeypatch, value):
    monkeypatch.setenv(process.START_ENV, value)
    with pytest.raises(Ns3Error, match=f"{process.START_ENV}={value}"):
        Ns3Process(_script(tmp_path, "never", SILENT))


def test_the_real_program_answers_hello_and_runs_from_a_relative_path(tmp_path,
                                                                      monkeypatch):
    exe = program_path()
    monkeypatch.chdir(exe.parent)
    monkeypatch.setenv(PREBUILT, exe.name)  # relative: the child runs in a folder of its own
    assert checked_program() == exe


def test_a_simulate_on_a_program_that_never_answers_leaves_no_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(PREBUILT, str(_script(tmp_path, "mute", SILENT)))
    monkeypatch.setenv(process.START_ENV, "1")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["simulate", str(ROOT / "scenarios" / "default.yaml"),
                                       "--engine", "ns3", "--out", str(out), "--quiet"])
    assert result.exit_code == 2, result.output
    assert PREBUILT in result.output and "did not answer" in result.output
    assert not out.exists() or not any(out.iterdir())


def test_an_unusable_program_is_unavailable_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setenv(PREBUILT, str(tmp_path / "nowhere"))
    with pytest.raises(Ns3Unavailable, match="not an executable file"):
        checked_program()
    monkeypatch.setenv(PREBUILT, os.devnull)
    with pytest.raises(Ns3Unavailable):
        checked_program()
