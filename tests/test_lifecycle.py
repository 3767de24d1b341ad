"""lifecycle: hicache's stop signals, the lifeline below it; and what the report and the
probe make of a run stopped from outside (real child processes where liveness is the point)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import psutil
import pytest

from hicache_cli import lifecycle
from hicache_cli.config import StressConfig
from hicache_cli.launch import launcher
from hicache_cli.launch.supervisor import ProcessTree
from hicache_cli.lifecycle import Lifeline, StopRequests, exit_code_for, owner_alive, owner_token
from hicache_cli.outcome import RunOutcome
from hicache_cli.protocol import ORPHANED_EXIT
from hicache_cli.rank import probe as probe_module
from hicache_cli.rank.probe import LoopStats, Probe, RankIdentity, Readings
from hicache_cli.sample import Sample
from tests.conftest import report_json

PP2 = StressConfig(pp=2, duration_s=60.0)


@pytest.mark.parametrize(
    ("name", "code"), [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129), ("SIGKILL", 137), (None, 130), ("X", 130)]
)
def test_exit_codes_follow_the_shell_convention(name: str | None, code: int) -> None:
    assert exit_code_for(name) == code


def test_the_first_stop_signal_interrupts_and_the_rest_are_only_noted() -> None:
    stops = StopRequests()
    with pytest.raises(KeyboardInterrupt):
        stops._handle(signal.SIGTERM, None)
    stops._handle(signal.SIGHUP, None)  # while stopping: no second interrupt
    assert stops.signal == "SIGTERM"
    assert stops.exit_code() == 143


def test_a_signal_while_hicache_finishes_is_noted_not_raised() -> None:
    stops = StopRequests()
    with stops.finishing():
        stops._handle(signal.SIGHUP, None)
    assert stops.signal == "SIGHUP"


def test_install_and_restore_put_the_handlers_back() -> None:
    stops = StopRequests()
    before = signal.getsignal(signal.SIGTERM)
    stops.install()
    try:
        assert signal.getsignal(signal.SIGTERM) == stops._handle
    finally:
        stops.restore()
    assert signal.getsignal(signal.SIGTERM) == before


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_the_owner_is_alive_while_it_runs_and_not_once_it_is_a_zombie() -> None:
    child = _sleeper()
    token = owner_token(child.pid)
    try:
        assert owner_alive(token)
        child.kill()
        deadline = time.monotonic() + 5
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not owner_alive(token)  # killed, not yet reaped: gone all the same
    finally:
        child.wait()
    assert not owner_alive(token)


def test_a_reused_pid_is_not_the_owner() -> None:
    pid, _ = owner_token().split(":")
    assert owner_alive(owner_token())
    assert not owner_alive(f"{pid}:1")  # same pid, another start time


def test_the_lifeline_names_what_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lifecycle.OWNER_ENV, owner_token())
    line = Lifeline(watch_parent=True)
    assert line.lost() is None
    monkeypatch.setattr(lifecycle.os, "getppid", lambda: line.parent + 1)
    assert line.lost() == f"its parent process (pid {line.parent}) is gone"
    child = _sleeper()
    token = owner_token(child.pid)
    child.kill()
    child.wait()
    assert Lifeline(token).lost() == f"hicache (pid {child.pid}) is gone"


def test_the_parent_death_signal_reaches_the_child_of_a_killed_parent(tmp_path: Any) -> None:
    """A parent (standing in for hicache) starts a child with the signal armed, then is SIGKILLed."""
    if lifecycle.parent_death_signal() is None:
        pytest.skip("no parent-death signal on this platform")
    script = (
        "import subprocess, sys, time\n"
        "from hicache_cli.lifecycle import parent_death_signal\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
        "preexec_fn=parent_death_signal())\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    child = psutil.Process(child_pid)
    parent.kill()
    parent.wait()
    try:
        child.wait(timeout=5)
    except psutil.TimeoutExpired:
        child.kill()
        pytest.fail("the child outlived its killed parent")


def _probe(out: io.StringIO, lifeline: Lifeline) -> Probe:
    now = time.monotonic()
    return Probe(RankIdentity(0, 0, 0), LoopStats(), Readings, out, 10.0, now, now + 60.0, 1.5, lifeline=lifeline)


class _Orphaned(Lifeline):
    def lost(self) -> str | None:
        return "hicache (pid 7) is gone"


def test_an_orphaned_probe_writes_its_final_line_and_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    exits: list[int] = []
    monkeypatch.setattr(probe_module.os, "_exit", exits.append)
    monkeypatch.setattr(probe_module, "LIFELINE_EVERY_S", 0.0)
    monkeypatch.setattr(probe_module.signal, "sigtimedwait", lambda sigset, timeout: None)
    out = io.StringIO()
    _probe(out, _Orphaned())._sample_until_stopped()
    final = Sample.from_dict(json.loads(out.getvalue().splitlines()[-1]))
    assert (final.kind, final.state) == ("final", "interrupted")
    assert final.message == "stopped before the deadline: hicache (pid 7) is gone"
    assert exits == [ORPHANED_EXIT]


def test_a_stop_signal_is_named_in_the_final_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe_module.os, "_exit", lambda code: None)
    out = io.StringIO()
    _probe(out, Lifeline(""))._stop_on_signal(signal.SIGTERM)
    final = json.loads(out.getvalue())
    assert (final["state"], final["signal"]) == ("interrupted", "SIGTERM")


# what the report makes of it


def _two_ranks(make_series: Callable[..., list[Sample]], **final: Any) -> dict[int, list[Sample]]:
    return {0: make_series(0, n=30, **final), 1: make_series(1, n=30, **final)}


def test_hicache_stopped_by_a_signal_is_interrupted_by_it(make_series: Callable[..., list[Sample]]) -> None:
    report = report_json(PP2, _two_ranks(make_series), RunOutcome(interrupted=True, interrupted_by="SIGHUP"))
    assert report["status"] == "interrupted"
    assert report["interruption"] == {"signal": "SIGHUP", "to": "hicache", "message": None}


def test_ranks_stopped_from_outside_make_an_interrupted_run_not_a_completed_one(
    make_series: Callable[..., list[Sample]],
) -> None:
    samples = _two_ranks(make_series, final_state="interrupted", message="stopped by SIGTERM before the deadline")
    samples[1][-1] = Sample.from_dict({**samples[1][-1].as_dict(), "signal": "SIGTERM"})
    samples[0][-1] = Sample.from_dict({**samples[0][-1].as_dict(), "signal": "SIGTERM"})
    report = report_json(PP2, samples, RunOutcome(exit_code=1))
    assert report["status"] == "interrupted"
    assert report["interruption"]["to"] == "ranks"
    assert report["interruption"]["signal"] == "SIGTERM"


def test_torchrun_killed_is_an_interruption_even_with_the_broken_pairs_it_left(
    make_series: Callable[..., list[Sample]],
) -> None:
    samples = {
        0: make_series(0, n=30, final_state="error", message="RuntimeError: Connection closed by peer"),
        1: make_series(1, n=30, final_state="interrupted", message="stopped before the deadline: its parent is gone"),
    }
    report = report_json(PP2, samples, RunOutcome(exit_code=-9))
    assert report["status"] == "interrupted"
    assert report["interruption"]["signal"] == "SIGKILL"
    assert [f["rank"] for f in report["failures"]] == [0]  # what happened is still listed


def test_ranks_stopped_after_a_real_failure_are_not_an_interruption(make_series: Callable[..., list[Sample]]) -> None:
    samples = {
        0: make_series(0, n=30, final_state="interrupted", message="stopped by SIGTERM before the deadline"),
        1: make_series(1, n=30, final_state="error", message="RuntimeError: boom"),
    }
    report = report_json(PP2, samples, RunOutcome(exit_code=1))
    assert report["status"] == "failed"
    assert report["interruption"] is None


# the launcher ends ranks that torchrun left behind


def test_processes_left_behind_are_ended_up_the_ladder() -> None:
    stubborn = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"]
    )
    polite = _sleeper()
    tree = ProcessTree()
    for proc in (stubborn, polite):
        tree.add_root(proc.pid)  # started here: their exit status is their Popen's to collect
    time.sleep(0.3)  # let the stubborn one ignore SIGTERM
    assert tree.end([(None, 0.2), (signal.SIGTERM, 0.5), (signal.SIGKILL, 2.0)], groups=False)
    assert (polite.wait(5), stubborn.wait(5)) == (-signal.SIGTERM, -signal.SIGKILL)
    assert not any(os.path.exists(f"/proc/{p.pid}") for p in (polite, stubborn))


def test_ranks_know_their_owner_and_never_see_the_nodes_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HICACHE_RUN_SECRET", "s" * 20)
    env = launcher.rank_environment("127.0.0.1")
    assert env[lifecycle.OWNER_ENV] == owner_token()
    assert env["PYTHONSAFEPATH"] == "1"  # a cache.py in the user's directory never shadows ours
    assert "HICACHE_RUN_SECRET" not in env
