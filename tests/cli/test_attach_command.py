"""`hicache attach` and `check --pid` refuse in one line, exit 2, before anything is made or
touched: a pid that is not there, a process that is not Python, options of hicache's own
workload. The real attach is tests/integration/test_attach_real.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import hicache_cli as hc
from hicache_cli.config import RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.targets import AttachedProcess
from tests.conftest import assert_refused


@pytest.fixture
def sleeper() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.fixture
def gone() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # a default run directory would land here
    return tmp_path


def test_attach_to_a_pid_that_is_not_there(
    gone: int, here: Path, capsys: pytest.CaptureFixture[str], fake_execute: Any
) -> None:
    assert_refused(["attach", str(gone)], f"no process with pid {gone}", capsys, fake_execute, here)


def test_attach_to_a_process_that_is_not_python(
    sleeper: int, here: Path, capsys: pytest.CaptureFixture[str], fake_execute: Any
) -> None:
    message = f"pid {sleeper} (sleep) is not a Python process"
    assert_refused(["attach", str(sleeper)], message, capsys, fake_execute, here)


def test_attach_to_a_python_without_torch(here: Path, capsys: pytest.CaptureFixture[str], fake_execute: Any) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert_refused(["attach", str(proc.pid)], f"pid {proc.pid} (python", capsys, fake_execute, here)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["attach"], "name the process to attach to, e.g. hicache attach 12345"),
        (["attach", "0"], "pid 0: a process id is a whole number above 0"),
        (["attach", "--duration", "0s", "PID"], "--duration: must be more than zero"),
        (["check", "--pid", "PID", "--pp", "4"], "--pp shapes hicache's own workload; with --pid the process is"),
        (["check", "--pid", "PID", "--loop", "m:f"], "--loop names a function of a traced program"),
        (["check", "--pid", "PID", "--", "python", "x.py"], "give --pid (a process already running) or -- COMMAND"),
        (["check", "--pid", "PID", "--duration", "5s", "--max-duration", "9s"], "give --duration or --max-duration"),
    ],
)
def test_bad_attach_options_are_one_line(
    argv: list[str], message: str, here: Path, capsys: pytest.CaptureFixture[str], fake_execute: Any
) -> None:
    argv = [str(os.getpid()) if a == "PID" else a for a in argv]  # this process: Python with torch, ours to trace
    assert_refused(argv, message, capsys, fake_execute, here)


def test_the_api_refuses_as_the_command_does(gone: int) -> None:
    with pytest.raises(UsageError) as caught:
        hc.attach_to(gone)
    assert str(caught.value) == f"no process with pid {gone}"
    with pytest.raises(UsageError, match=r"hicache_cli.attach_to\(pids\)"):
        hc.run(RunConfig(target=AttachedProcess(pids=(gone,))))
