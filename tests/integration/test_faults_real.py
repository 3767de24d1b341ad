"""Faults injected into real ranks: what each policy does, and that the tool reports it and ends."""

from __future__ import annotations

import re

import psutil
import pytest

from hicache_cli.errors import EXIT_RUN_FAILED
from tests.integration.helpers import FORK, Run, stress_run

pytestmark = pytest.mark.slow


def _failure(run: Run, rank: int) -> dict:
    return next(f for f in run.report["failures"] if f["rank"] == rank)


def _nothing_left(run: Run) -> None:
    pids = [r["pid"] for r in run.report["ranks"] if "pid" in r]
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive


def test_bounded_drain_names_the_stuck_peer(tmp_path) -> None:
    run = stress_run(
        tmp_path,
        "--policy",
        "bounded-drain",
        "--wait-timeout",
        "1s",
        "--fault",
        "hang:1:1s",
        "--duration",
        "10s",
        *FORK,
    )
    assert run.proc.returncode == EXIT_RUN_FAILED
    assert run.report["status"] == "failed"
    assert run.report["root_cause"] == 0
    failure = _failure(run, 0)
    assert failure["kind"] == "error"
    # the message gives the time the wait took: at least the 1 s timeout (more on a busy machine)
    waited = re.search(r"isend to rank 1 \(pp rank 1\) not received after (\d+\.\d) s", failure["message"])
    assert waited and float(waited.group(1)) >= 1.0, failure["message"]
    assert run.report["ranks"][0]["backlog_at_stop"]["outstanding_sends"] == 0  # cleared in finally
    _nothing_left(run)


def test_drain_with_a_hung_receiver_is_caught_by_the_watchdog(tmp_path) -> None:
    run = stress_run(
        tmp_path, "--policy", "drain", "--fault", "hang:1:2s", "--stall-timeout", "2s", "--duration", "20s", *FORK
    )
    assert run.proc.returncode == EXIT_RUN_FAILED
    assert run.report["root_cause"] == 1
    hung, blocked = _failure(run, 1), _failure(run, 0)
    assert hung["kind"] == "stall" and "injected fault hang:1:2s" in hung["message"]
    assert blocked["kind"] == "stall" and blocked["consequence_of"] == 1
    assert "blocked in drain, waiting on isend to pp rank 1" in blocked["message"]
    assert "stack top: wait" in blocked["message"]
    stacks = (run.run_dir / blocked["stack_file"]).read_text()
    assert "run_loop" in stacks and "at_round_start" in stacks
    assert run.report["wall_s"] < 20  # ended by the watchdog, well before the duration
    _nothing_left(run)


def test_a_killed_rank_is_named_with_its_signal(tmp_path) -> None:
    run = stress_run(tmp_path, "--pp", "4", "--policy", "drain", "--fault", "kill:2:1s", "--duration", "8s")
    assert run.proc.returncode == EXIT_RUN_FAILED
    assert run.report["root_cause"] == 2
    killed = _failure(run, 2)
    assert (killed["kind"], killed["signal"], killed["exit_code"]) == ("crash", "SIGKILL", -9)
    others = [f for f in run.report["failures"] if f["rank"] != 2]
    assert all(f.get("consequence_of") == 2 for f in others)
    _nothing_left(run)


def test_a_rank_the_fork_launcher_started_is_named_with_its_signal_when_killed(tmp_path) -> None:
    """The same through `--launcher fork`: its failure summary in torchrun.log, read back as
    torchrun's is; the other rank stopped; nothing left running."""
    run = stress_run(tmp_path, "--policy", "drain", "--fault", "kill:1:1s", "--duration", "8s", *FORK)
    assert run.proc.returncode == EXIT_RUN_FAILED
    assert run.report["root_cause"] == 1
    killed = _failure(run, 1)
    assert (killed["kind"], killed["signal"], killed["exit_code"]) == ("crash", "SIGKILL", -9)
    assert "hicache's fork launcher" in (run.run_dir / "torchrun.log").read_text()
    _nothing_left(run)


@pytest.mark.parametrize(("policy", "left"), [("drain", 2), ("bounded-drain", 0)])
def test_raise_in_wait_leaves_the_list_as_the_policy_does(tmp_path, policy: str, left: int) -> None:
    run = stress_run(tmp_path, "--policy", policy, "--fault", "raise-in-wait:0:1s", "--duration", "8s", *FORK)
    assert run.proc.returncode == EXIT_RUN_FAILED
    failure = _failure(run, 0)
    assert "injected fault: wait() on isend to rank 1 raised" in failure["message"]
    # drain has no try/finally: the round's two sends stay in the list; bounded-drain clears it
    assert run.report["ranks"][0]["backlog_at_stop"]["outstanding_sends"] == left


def test_lag_and_a_short_stall_slow_drain_but_do_not_fail_it(tmp_path) -> None:
    run = stress_run(
        tmp_path, "--policy", "drain", "--fault", "lag:1:2", "--fault", "stall:1:2s:1s", "--duration", "6s", *FORK
    )
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.report["status"] == "completed"
    rank0 = run.report["ranks"][0]
    assert rank0["loop_latency_ms"]["max"] >= 900  # PP0 waited out PP1's 1 s stall (backpressure)
    assert rank0["work_list"]["max"] <= 2
    assert run.report["pp_consistency"]["consistent"]
    # PP1 lags 2 ms a round: PP0's sends wait in its backlog, seen in the series and at the stop
    rank1 = run.report["ranks"][1]
    assert max(u for u in rank1["series"]["unreceived"] if u is not None) > 0
    unreceived = rank1["backlog_at_stop"]["unreceived_messages"]
    assert rank0["messages"]["sent"] == rank1["messages"]["received"] + unreceived


def test_idle_skip_stays_consistent_and_sends_only_when_busy(tmp_path) -> None:
    run = stress_run(tmp_path, "--policy", "idle-skip", "--workload", "idle", "--duration", "5s", *FORK)
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.report["pp_consistency"]["consistent"]
    assert run.report["pp_consistency"]["checked_rounds"] > 0
    assert run.report["ranks"][0]["messages"]["sent"] == 0  # an idle server no longer syncs at all
