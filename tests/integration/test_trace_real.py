"""`hicache trace` and `hicache check -- COMMAND` on real programs nobody shaped after hicache:
small scripts written the way users write them (programs/), torch's own
torch.distributed.pipelining schedules, torch.multiprocessing.spawn, and SGLang 0.5.14's
own code (driven by `hicache stress`, itself traced). Real torchrun, real gloo ranks; the
programs whose verdicts alone are read start under programs/fork_launch.py (torch.multiprocessing)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.integration.attach_helpers import FORK_LAUNCH, TORCHRUN
from tests.integration.helpers import REPO, TracedStress

pytestmark = pytest.mark.slow

PROGRAMS = Path(__file__).resolve().parent / "programs"
# FORK_LAUNCH (attach_helpers): how some users launch a single-node job instead, the ranks
# forked from one process that imported torch once, not torchrun's interpreter and one import
# a rank (2.6 CPU-s and 2 s less a two-rank trace here): for the programs whose verdicts and
# causes are read; torchrun's own path (its agent, its signals) is traced by the tests that say so


@dataclass
class Traced:
    proc: subprocess.CompletedProcess[str]
    run_dir: Path
    report: dict[str, Any]

    def rank(self, rank: int) -> dict[str, Any]:
        return next(r for r in self.report["ranks"] if r["rank"] == rank)


def hicache_args(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hicache_cli", *args],
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def trace(tmp: Path, *command: str, verb: str = "trace", options: tuple[str, ...] = ()) -> Traced:
    run_dir = tmp / "run"
    proc = hicache_args(verb, "--no-live", "--run-dir", str(run_dir), *options, "--", *command, cwd=tmp)
    report = run_dir / "report.json"
    assert report.is_file(), f"no report (exit {proc.returncode})\n{proc.stdout}\n{proc.stderr}"
    return Traced(proc, run_dir, json.loads(report.read_text()))


def program(name: str) -> str:
    return str(PROGRAMS / name)


@pytest.fixture(scope="module")
def leaky2(tmp_path_factory: pytest.TempPathFactory) -> Traced:
    return trace(tmp_path_factory.mktemp("leaky2"), *TORCHRUN, "--nproc-per-node", "2", program("leaky_p2p.py"),
                 "--seconds", "8")  # fmt: skip


def test_a_leaky_program_is_a_leak_named_by_its_isend_line(leaky2: Traced) -> None:
    assert leaky2.proc.returncode == 0, leaky2.proc.stderr  # the program's own exit code
    assert leaky2.report["status"] == "completed"
    rank0 = leaky2.rank(0)
    assert rank0["verdict"] == "LEAK"
    top = rank0["works"]["sites"][0]
    source = Path(program("leaky_p2p.py")).read_text().splitlines()
    assert (Path(top["file"]).name, top["function"], top["op"], top["peer"]) == ("leaky_p2p.py", "sync_counts",
                                                                                 "isend", 1)  # fmt: skip
    assert "dist.isend" in source[top["line"] - 1]
    assert f"leaky_p2p.py:{top['line']} in sync_counts (isend to rank 1), never waited" in rank0["verdict_reason"]
    assert top["waited"] == 0 and top["live"] > 1000
    # the program printed how many Works it kept; the tracer counted the same
    kept = next(line for line in leaky2.proc.stdout.splitlines() if line.startswith("rank 0/2"))
    assert f"pending_works={rank0['works']['live_final']}" in kept


def test_the_last_stage_of_a_leaky_program_is_not_a_leak(leaky2: Traced) -> None:
    rank1 = leaky2.rank(1)
    assert rank1["verdict"] != "LEAK"
    # its blocking recv's Works are torch's, waited before recv returns: none is the program's
    assert rank1["works"]["created"] == rank1["works"]["live_max"] == 0
    assert rank1["samples"] > 10


def test_the_programs_output_passes_through_and_the_run_directory_holds_every_rank(leaky2: Traced) -> None:
    assert "rank 1/2: rounds=" in leaky2.proc.stdout
    assert "hicache trace:" in leaky2.proc.stderr and "hicache trace:" not in leaky2.proc.stdout
    for r in leaky2.report["ranks"]:
        lines = (leaky2.run_dir / f"rank-{r['slot']}.jsonl").read_text().splitlines()
        assert r["samples"] == len(lines)
        assert json.loads(lines[-1])["message"] == "the process left with os._exit(0)"


def test_a_draining_twin_passes_the_gate_stopped_at_its_duration(tmp_path: Path) -> None:
    # --duration counts the program's start-up (documented): beside a CPU hog torchrun and the
    # ranks took 13.7 s of 15 once, too little was left to decide. The program mostly sleeps,
    # so 20 s cost wall time, hardly CPU.
    run = trace(tmp_path, *TORCHRUN, "--nproc-per-node", "2", program("draining_p2p.py"), "--seconds", "120",
                verb="check", options=("--duration", "20s"))  # fmt: skip
    assert run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
    assert run.report["program_stopped"] == "reached the duration (20 s)"
    for r in run.report["ranks"]:
        assert r["verdict"] == "BOUNDED"
        assert r["works"]["live_max"] <= 2
        assert r["stop"] == "stopped by hicache at the end of the trace"
    assert "hicache check PASS" in run.proc.stdout + run.proc.stderr
    # stopped as Ctrl-C would stop it: torchrun's and the ranks' tracebacks of that SIGINT are
    # kept in program.log, said in one line, not printed as if the program had failed
    output = run.proc.stdout + run.proc.stderr
    assert "SignalException" not in output and "KeyboardInterrupt" not in output
    assert "the program printed while hicache stopped it (as Ctrl-C would) are in" in run.proc.stderr
    assert "SignalException" in (run.run_dir / "program.log").read_text()


def test_four_ranks_every_sending_rank_fails_the_gate_early(tmp_path: Path) -> None:
    run = trace(tmp_path, *FORK_LAUNCH, "--nproc-per-node", "4", program("leaky_p2p.py"), "--seconds", "120",
                verb="check", options=("--max-duration", "60s"))  # fmt: skip
    assert run.proc.returncode == 1, run.proc.stdout + run.proc.stderr
    assert run.report["stopped_early"].startswith("LEAK settled after")
    verdicts = {r["rank"]: r["verdict"] for r in run.report["ranks"]}
    assert [verdicts[r] for r in (0, 1, 2)] == ["LEAK"] * 3
    assert verdicts[3] != "LEAK"
    for rank in (0, 1, 2):
        top = run.rank(rank)["works"]["sites"][0]
        assert (top["op"], top["peer"]) == ("isend", rank + 1)
    assert not _traced_processes(run.run_dir)  # stopped early: the whole program, not only torchrun


@pytest.mark.parametrize(("schedule", "stages"), [("gpipe", 2), ("1f1b", 4)])
def test_torch_pipelining_training_is_not_a_leak(tmp_path: Path, schedule: str, stages: int) -> None:
    run = trace(tmp_path, *FORK_LAUNCH, "--nproc-per-node", str(stages), program("pipeline_train.py"),
                "--schedule", schedule, "--microbatches", "4", "--steps", "8")  # fmt: skip
    assert run.proc.returncode == 0, run.proc.stderr
    assert "step 7 loss" in run.proc.stdout
    assert len([r for r in run.report["ranks"] if r["samples"]]) == stages
    for r in run.report["ranks"]:
        works = r["works"]
        assert r["verdict"] != "LEAK"
        assert works["created"] >= 8 and works["live_final"] == 0
        assert works["waited"] + works["dropped"] == works["created"]
        assert Path(works["sites"][0]["file"]).name == "pipeline_train.py"  # the program's line, not torch's


def test_a_spawned_program_is_observed_on_every_rank(tmp_path: Path) -> None:
    run = trace(tmp_path, sys.executable, program("spawn_workers.py"), "--world-size", "2", "--seconds", "3")
    assert run.proc.returncode == 0, run.proc.stderr
    assert sorted(r["rank"] for r in run.report["ranks"]) == [0, 1]
    for r in run.report["ranks"]:
        ops = {s["op"] for s in r["works"]["sites"]}
        assert {"all_reduce", "isend", "irecv"} <= ops
        assert r["works"]["live_final"] == 0
        assert r["stop"] == "the process exited"


def test_a_program_without_torch_distributed_passes_through(tmp_path: Path) -> None:
    run = trace(tmp_path, sys.executable, program("no_dist.py"), "--exit-code", "7")
    assert run.proc.returncode == 7
    assert run.proc.stdout.strip() == "no_dist: hello on stdout"
    assert "no_dist: hello on stderr" in run.proc.stderr
    assert run.report["ranks"] == [] and run.report["program_exit_code"] == 7
    assert not list(run.run_dir.glob("rank-*"))


def test_sglangs_own_leak_matches_the_stress_runs_depth_and_names_sglangs_line(sglang_leaky: TracedStress) -> None:
    """`stress --target sglang==0.5.14` under `trace` (conftest's sglang_leaky)."""
    run = sglang_leaky.traced
    assert run.proc.returncode == 0, run.proc.stderr
    depth = sglang_leaky.stress.report["ranks"][0]["work_list"]["final"]
    rank0 = next(r for r in run.report["ranks"] if r["rank"] == 0)
    live = rank0["works"]["live_final"]
    rounds = sglang_leaky.stress.report["ranks"][0]["rounds"]
    # every round keeps its Works (two a round on rank 0), whatever rounds a busy machine allowed
    assert rounds > 1000 and depth >= rounds, (rounds, depth)
    assert abs(live - depth) <= depth * 0.01
    top = rank0["works"]["sites"][0]
    assert (Path(top["file"]).name, top["function"], top["op"]) == ("hiradix_cache.py", "_pp_sync", "isend")
    assert top["file"].endswith("sglang/srt/mem_cache/hiradix_cache.py")


def _start_long_trace(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hicache_cli", "trace", "--no-live", "--run-dir", str(run_dir), "--",
         *TORCHRUN, "--nproc-per-node", "2", program("leaky_p2p.py"), "--seconds", "120"],
        cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not all((run_dir / f"rank-{r}.jsonl").exists() for r in (0, 1)):
        time.sleep(0.2)
    time.sleep(1.5)
    return proc, run_dir


def _tree(pid: int) -> list[psutil.Process]:
    proc = psutil.Process(pid)
    return [proc, *proc.children(recursive=True)]


def _traced_processes(run_dir: Path) -> list[int]:
    """Processes still running with this run's tracer environment."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("HICACHE_TRACE_DIR") == str(run_dir.resolve()):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def _left_running(procs: list[psutil.Process], within_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while True:
        left = [p.pid for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not left or time.monotonic() > deadline:
            for pid in left:
                psutil.Process(pid).kill()
            return left
        time.sleep(0.2)


def test_sigterm_to_hicache_stops_the_program_and_keeps_a_report(tmp_path: Path) -> None:
    proc, run_dir = _start_long_trace(tmp_path)
    procs = _tree(proc.pid)
    assert len(procs) >= 4  # hicache, torchrun, two ranks
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert not _left_running(procs)
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "interrupted"
    assert report["interruption"]["signal"] == "SIGTERM"
    assert report["ranks"][0]["works"]["live_final"] > 100  # what was measured until the stop is kept
    for r in report["ranks"]:
        assert r["stop"] == "stopped by hicache at the end of the trace"


def test_sigkill_to_hicache_leaves_nothing_of_the_program_running(tmp_path: Path) -> None:
    proc, run_dir = _start_long_trace(tmp_path)
    procs = _tree(proc.pid)
    proc.kill()
    proc.communicate(timeout=10)
    assert not _left_running(procs, within_s=10.0)
    assert not _traced_processes(run_dir)
    # torchrun, given SIGTERM as hicache died, ends its ranks; their samples stay (a final
    # line only when a rank saw hicache go before torchrun's SIGTERM reached it)
    assert all(len((run_dir / f"rank-{r}.jsonl").read_text().splitlines()) > 10 for r in (0, 1))
