"""`hicache attach PID` and `hicache check --pid PID`, the real CLI on live processes: a 2-rank
gloo server under torchrun that keeps its isend Works in `Scheduler.sync_works`
(programs/serving_p2p.py), attached by torchrun's pid; the same server draining; a
`hicache stress` rank (whose probe waits in sigtimedwait, which a ptrace attach upsets on
some kernels); processes that cannot be attached. Real gdb, real ptrace, real gloo.

Each server is attached to several times in one module fixture, and the tests read what
each command left."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import hicache_cli as hc
from hicache_cli.analysis.results import AttachSection
from hicache_cli.attach import protocol
from hicache_cli.protocol import sample_files
from tests.integration.attach_helpers import (
    FORK_LAUNCH,
    PROGRAMS,
    Command,
    hicache_run,
    serve_beside_reference,
    start_hicache,
    start_server,
    wait_for,
)
from tests.integration.helpers import PACED

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("gdb") is None, reason="needs gdb (apt-get install gdb)"),
]
CENSUS_WITHIN_S = 30.0  # the promise: the holder named within 30 s of the command


def report_of(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "report.json").read_text())


def rank(report: dict[str, Any], number: int) -> dict[str, Any]:
    return next(r for r in report["ranks"] if r["rank"] == number)


def attach_then_signal(
    pid: int, run_dir: Path, tmp: Path, signo: int, how: tuple[str, ...] = ("--duration", "10m"), after_s: float = 1.0
) -> tuple[Command, bool]:
    """`hicache attach` with a long duration (or `how`), stopped by `signo` `after_s` after
    its census is out; whether the process was still running when hicache had exited."""
    command = start_hicache("attach", *how, "--no-live", "--run-dir", str(run_dir), str(pid),
                            cwd=tmp, sigint_default=True)  # fmt: skip
    command.wait_for_census()
    wait_for(lambda: bool(sample_files(run_dir)), 60, "samples")
    time.sleep(after_s)
    command.proc.send_signal(signo)
    command.wait(120)
    return command, _alive(pid)


@dataclass
class Leaky:
    reference: tuple[int, list[str]]
    torchrun: int
    attach: Command
    attach_dir: Path
    running_after_attach: bool
    gate: Command
    running_after_gate: bool
    terminated: tuple[Command, bool]
    interrupted: tuple[Command, bool]
    term_dir: Path
    followed: tuple[Command, bool]
    follow_dir: Path
    exit_code: int
    lines: list[str]


@pytest.fixture(scope="module")
def leaky(tmp_path_factory: pytest.TempPathFactory, attached_references: dict[str, tuple[int, list[str]]]) -> Leaky:
    tmp = tmp_path_factory.mktemp("attach-cli-leaky")
    # it has been leaking for 2 s before anyone looks
    server, reference = serve_beside_reference(tmp, "reap", attached_references)
    try:
        attach = hicache_run("attach", "--duration", "5s", "--no-live", "--json", "--run-dir", str(tmp / "attach"),
                             str(server.pid), cwd=tmp)  # fmt: skip
        after_attach = server.running()
        gate = hicache_run("check", "--pid", str(server.pid), "--duration", "5s", "--no-live", "--run-dir",
                           str(tmp / "check"), cwd=tmp)  # fmt: skip
        after_gate = server.running()
        rank0, rank1 = server.ranks()
        terminated = attach_then_signal(rank0, tmp / "term", tmp, signal.SIGTERM)
        interrupted = attach_then_signal(rank1, tmp / "int", tmp, signal.SIGINT)
        # followed for less than one census interval: only the censuses at attach and at detach count its Works
        # (its probe samples once a second: 10 s make the 8 points a verdict needs)
        following = ("--follow", "--census-every", "10m", "--window", "3s")
        followed = attach_then_signal(rank0, tmp / "follow", tmp, signal.SIGTERM, following, after_s=10.0)
        code = server.stop()
        return Leaky(reference, server.pid, attach, tmp / "attach", after_attach, gate, after_gate, terminated,
                     interrupted, tmp / "term", followed, tmp / "follow", code, sorted(server.lines))  # fmt: skip
    finally:
        server.kill()


def test_attach_names_the_holder_and_its_count_within_30_s(leaky: Leaky) -> None:
    assert leaky.attach.proc.returncode == 0, leaky.attach.text("err")
    said = leaky.attach.first("`Scheduler.sync_works` (list)")
    assert said is not None and said < CENSUS_WITHIN_S, leaky.attach.text("err")
    report = json.loads(leaky.attach.text("out"))  # --json: the report on stdout, the rest on stderr
    process = next(p for p in report["target"]["processes"] if p["rank"] == 0)
    top = process["holders"][0]
    assert (top["path"], top["container"], top["completed"]) == ("Scheduler.sync_works", "list", 0)
    assert top["works"] > 100 and top["works_end"] > top["works"] and top["growth"] == top["works_end"] - top["works"]
    assert f"{top['works']:>8,} Works 0 completed  `Scheduler.sync_works` (list)" in leaky.attach.text("err")
    assert process["method"] == "gdb" and process["inject_s"] > 0 and process["detach_reason"] == "hicache asked"
    cost = process["cost"]
    assert cost["objects"] > 0 and cost["busy_s"] > 0 and cost["pause_per_million_s"] > 0


def test_a_follow_shorter_than_a_census_interval_counts_the_works_at_detach(leaky: Leaky) -> None:
    """No hook counts a follow's Works between censuses: its last line carries the census
    taken at detach, so a leak followed for seconds reads as one (it read 'memory grows,
    not from Works', INCONCLUSIVE, with the holder +16,815 while attached beside it)."""
    command, running = leaky.followed
    assert command.proc.returncode == 128 + signal.SIGTERM, command.text("err")
    assert running
    rank0 = rank(report_of(leaky.follow_dir), 0)
    assert rank0["verdict"] == "LEAK", rank0["verdict_reason"]
    assert rank0["verdict_reason"].startswith("live Works only grows")
    assert "`Scheduler.sync_works` holds" in rank0["verdict_reason"]
    process = next(p for p in report_of(leaky.follow_dir)["target"]["processes"] if p["rank"] == 0)
    assert process["works_end"] > process["works"] > 0
    assert rank0["works"]["live_final"] == process["works_end"]  # the table's live final: the last census's


def test_attaching_by_torchrun_s_pid_covers_both_ranks(leaky: Leaky) -> None:
    processes = report_of(leaky.attach_dir)["target"]["processes"]
    states = {p["rank"]: p["state"] for p in processes}
    assert states == {None: "refused", 0: "detached", 1: "detached"}
    assert next(p for p in processes if p["rank"] is None)["pid"] == leaky.torchrun  # its agent: no process group
    assert [r["rank"] for r in report_of(leaky.attach_dir)["ranks"]] == [0, 1]


def test_the_new_works_creation_line_is_named_and_the_verdict_leads_with_the_holder(leaky: Leaky) -> None:
    rank0 = rank(report_of(leaky.attach_dir), 0)
    site = rank0["works"]["sites"][0]
    source = (PROGRAMS / "serving_p2p.py").read_text().splitlines()
    where = (Path(site["file"]).name, site["function"], site["op"], site["peer"])
    assert where == ("serving_p2p.py", "sync_counts", "isend", 1)
    assert "dist.isend" in source[site["line"] - 1] and site["waited"] == 0
    reason = rank0["verdict_reason"]
    assert rank0["verdict"] == "LEAK" and "; `Scheduler.sync_works` holds " in reason, reason
    assert reason.index("Scheduler.sync_works") < reason.index("serving_p2p.py")  # the holder, then the site


def test_check_pid_on_the_leaking_server_fails(leaky: Leaky) -> None:
    assert leaky.gate.proc.returncode == 1, leaky.gate.text() + leaky.gate.text("err")
    assert "hicache check FAIL (attach to pid" in leaky.gate.text()
    assert rank(report_of(leaky.attach_dir.parent / "check"), 0)["verdict"] == "LEAK"


def test_sigterm_and_ctrl_c_detach_and_leave_the_server_running(leaky: Leaky) -> None:
    for (command, alive), signo in ((leaky.terminated, signal.SIGTERM), (leaky.interrupted, signal.SIGINT)):
        assert command.proc.returncode == 128 + signo, command.text("err")
        assert alive
        assert f"(detached: interrupted by {signal.Signals(signo).name})" in command.text()
    report = report_of(leaky.term_dir)
    assert report["status"] == "interrupted" and report["interruption"]["signal"] == "SIGTERM"
    (process,) = report["target"]["processes"]
    assert process["state"] == protocol.DETACHED and process["leftovers"] == []


def test_the_server_ran_on_and_ended_as_it_would_have(leaky: Leaky) -> None:
    assert leaky.running_after_attach and leaky.running_after_gate
    assert (leaky.exit_code, leaky.lines) == leaky.reference
    assert leaky.exit_code == 0


@dataclass
class Draining:
    gate: Command
    report: dict[str, Any]
    by_api: hc.Report
    exit_code: int


@pytest.fixture(scope="module")
def draining(tmp_path_factory: pytest.TempPathFactory) -> Draining:
    tmp = tmp_path_factory.mktemp("attach-cli-drain")
    server = start_server(tmp, "drain", launcher=FORK_LAUNCH)
    try:
        time.sleep(1.0)
        gate = hicache_run("check", "--pid", str(server.pid), "--duration", "12s", "--no-live", "--json",
                           "--run-dir", str(tmp / "check"), cwd=tmp)  # fmt: skip
        by_api = hc.attach_to(server.ranks()[0], duration_s=3.0, census=False, run_dir=tmp / "api")
        return Draining(gate, report_of(tmp / "check"), by_api, server.stop())
    finally:
        server.kill()


def test_check_pid_on_a_draining_server_passes(draining: Draining) -> None:
    assert draining.gate.proc.returncode == 0, draining.gate.text("err")
    assert [r["verdict"] for r in draining.report["ranks"]] == ["BOUNDED", "BOUNDED"]
    assert json.loads(draining.gate.text())["result"] == "PASS"
    assert draining.exit_code == 0


def test_a_torch_multiprocessing_launcher_is_not_waited_for_once_its_ranks_answer(draining: Draining) -> None:
    """The draining server runs under programs/fork_launch.py (start_processes, fork): its
    parent, checked by its pid, waits in C for its ranks and never runs the injected code."""
    processes = draining.report["target"]["processes"]
    (launcher,) = [p for p in processes if p["rank"] is None]
    ranks = sorted(p["pid"] for p in processes if p["rank"] is not None)
    said = f"a launcher whose main thread waits in C code for its ranks below it (pid {ranks[0]}, {ranks[1]}, attached)"
    assert said in launcher["reason"], launcher
    assert "did not answer within 30 s" not in launcher["reason"]  # not the whole answer time


def test_the_api_attaches_without_a_census(draining: Draining) -> None:
    report = draining.by_api
    assert isinstance(report.target, AttachSection)
    (process,) = report.target.processes
    assert (process.rank, process.state, process.works, process.holders) == (0, "detached", None, [])
    assert report.rank(0).works is not None and report.rank(0).works.created > 0


def test_a_stress_rank_survives_an_attach(tmp_path: Path) -> None:
    """hicache's own rank blocks its stop signals and takes them with sigtimedwait: the ptrace
    attach and detach must not read as a signal (rank/probe.py's wait_for_signal). The run
    outlasts the attach (gdb, the census, 4 s traced) with room: at 10 s, beside a CPU hog,
    the rank once finished before its agent had written a sample."""
    stress = start_hicache("stress", "--pp", "2", "--policy", "drain", "--duration", "20s", "--no-live", *PACED,
                           "--run-dir", str(tmp_path / "stress"), cwd=tmp_path)  # fmt: skip
    rank_file = tmp_path / "stress" / "rank-0.jsonl"
    wait_for(lambda: rank_file.exists() and rank_file.stat().st_size > 0, 180, "rank 0's first sample")
    pid = json.loads(rank_file.read_text().splitlines()[0])["pid"]
    attach = hicache_run("attach", "--duration", "4s", "--no-live", "--run-dir", str(tmp_path / "attach"), str(pid),
                         cwd=tmp_path)  # fmt: skip
    assert stress.wait(240) == 0, stress.text() + stress.text("err")
    assert attach.proc.returncode == 0, attach.text("err")
    report = report_of(tmp_path / "stress")
    assert report["status"] == "completed" and report["failures"] == []
    # each rank ran to its deadline (a drain's last wait may meet its peer gone: not a failure)
    ends = [(r["rank"], r["state"], r["stop"]) for r in report["ranks"]]
    assert all(state == "done" and "deadline" in stop for _, state, stop in ends), ends
    assert rank(report_of(tmp_path / "attach"), 0)["works"]["created"] > 0  # it was traced meanwhile


@pytest.fixture
def sleeper() -> Any:
    proc = subprocess.Popen(["sleep", "120"])
    yield proc.pid
    proc.kill()
    proc.wait()


def test_a_pid_that_is_not_python_or_not_there_is_one_line_exit_2(tmp_path: Path, sleeper: int) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    for pid, message in ((sleeper, f"pid {sleeper} (sleep) is not a Python process"),
                         (gone.pid, f"no process with pid {gone.pid}")):  # fmt: skip
        for argv in (["attach", str(pid)], ["check", "--pid", str(pid)]):
            command = hicache_run(*argv, cwd=tmp_path, timeout=60)
            assert command.proc.returncode == 2
            assert command.text("err") == f"hicache: error: {message}\n" and command.text() == ""
    assert not (tmp_path / "hicache-runs").exists()  # refused before a run directory was made


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] not in "ZX"
    except OSError:
        return False
