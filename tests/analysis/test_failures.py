"""report: failures (crash, stall, hang, error), the root cause first, consequences, and pp_consistency."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.config import RunConfig, StressConfig
from hicache_cli.launch.torchrun_log import WorkerExit
from hicache_cli.outcome import RunOutcome
from hicache_cli.protocol import ErrorKind
from hicache_cli.protocol import stacks_file as stack_file
from hicache_cli.rank.entry import error_kind
from hicache_cli.sample import Sample
from hicache_cli.series import RunSeries
from hicache_cli.targets import SGLangTarget
from hicache_cli.watchdog import Stall
from tests.conftest import report_json

MakeSeries = Callable[..., list[Sample]]
MakeSample = Callable[..., Sample]
PP2 = StressConfig(pp=2, duration_s=10.0)

DRAIN_STALL = Stall(0, 1000, "stall", "rank 0 blocked in drain, waiting on isend to pp rank 1 for 6.0 s", 2.0, 1)
HUNG_BY_FAULT = Stall(1, 1001, "stall", "rank 1 blocked in injected fault hang:1:2s for 7.5 s", 2.5)
CONNECTION_CLOSED = "RuntimeError: Connection closed by peer [127.0.0.1]:41234"
# what the rank's final line says of such errors (rank.entry.error_kind decides it where the exception is known)
CONNECTION = (ErrorKind.CONNECTION, None)
CLOSED_TO_1 = (ErrorKind.CLOSED_AFTER_TIMEOUT, 1)


LOOP_THREAD = 0x00007F3AB1E4B740  # the thread conftest's stack dump runs the rounds on, as samples name it


def running(make_series: MakeSeries, rank: int, until_s: float, tp: int = 1) -> list[Sample]:
    """A rank's samples at 10 Hz up to `until_s`, without a final line (still running, or gone)."""
    series = make_series(rank, n=round(until_s * 10), tp=tp, final=False)
    return [dataclasses.replace(s, loop_thread=LOOP_THREAD) for s in series]


def failures_of(report: dict[str, Any]) -> list[tuple[int, str, int | None]]:
    return [(f["rank"], f["kind"], f.get("consequence_of")) for f in report["failures"]]


# -- crashes ---------------------------------------------------------------------------


def test_a_sigkilled_rank_is_a_crash_with_its_signal(make_series: MakeSeries) -> None:
    samples = {0: make_series(0, n=100), 1: running(make_series, 1, 4.0)}
    outcome = RunOutcome(
        exit_code=1,
        worker_exits={0: WorkerExit(0, -15, "SIGTERM"), 1: WorkerExit(1, -9, "SIGKILL")},
    )
    report = report_json(PP2, samples, outcome)
    assert report["status"] == "failed"
    assert report["root_cause"] == 1
    (failure,) = report["failures"]  # rank 0 wrote its final line: torchrun's SIGTERM was no failure
    assert failure == {
        "rank": 1,
        "kind": "crash",
        "exit_code": -9,
        "signal": "SIGKILL",
        "message": "killed by SIGKILL (exit code -9); last sample at 4.0 s",
        "stack_file": None,
        "at_s": 4.0,
    }


def test_a_rank_that_exited_with_a_code_is_a_crash_without_a_signal(make_series: MakeSeries) -> None:
    samples = {0: make_series(0, n=100), 1: running(make_series, 1, 3.0)}
    report = report_json(PP2, samples, RunOutcome(worker_exits={1: WorkerExit(1, 70, None)}))
    (failure,) = report["failures"]
    assert (failure["kind"], failure["exit_code"], failure["signal"]) == ("crash", 70, None)
    assert "exited with code 70 without its final line" in failure["message"]
    assert failure["at_s"] == 3.0


# -- stalls and hangs ------------------------------------------------------------------


def test_a_stall_with_its_stack_dump_names_the_file_and_the_blocked_frame(
    make_series: MakeSeries, tmp_path: Path, stack_dump: str
) -> None:
    stack_file(tmp_path, 0).write_text(stack_dump)
    samples = {0: running(make_series, 0, 8.0), 1: make_series(1, n=100)}
    report = report_json(PP2, samples, RunOutcome(exit_code=None, stalls=(DRAIN_STALL,)), tmp_path)
    assert report["status"] == "failed"
    (failure,) = report["failures"]
    assert failure == {
        "rank": 0,
        "kind": "stall",
        "exit_code": None,
        "signal": None,
        "message": DRAIN_STALL.message + "; stack top: wait (work_list.py:100)",
        "stack_file": "rank-0.stacks.txt",
        "at_s": 2.0,
    }


@pytest.mark.parametrize("dump", [None, ""], ids=["no stack file", "an empty stack file"])
def test_a_stall_without_a_stack_dump_has_no_stack_file(
    make_series: MakeSeries, tmp_path: Path, dump: str | None
) -> None:
    if dump is not None:
        stack_file(tmp_path, 0).write_text(dump)
    samples = {0: running(make_series, 0, 8.0), 1: make_series(1, n=100)}
    (failure,) = report_json(PP2, samples, RunOutcome(stalls=(DRAIN_STALL,)), tmp_path)["failures"]
    assert failure["stack_file"] is None
    assert failure["message"] == DRAIN_STALL.message


def test_a_stall_reported_without_a_run_directory_has_no_stack_file(make_series: MakeSeries) -> None:
    samples = {0: running(make_series, 0, 8.0), 1: make_series(1, n=100)}
    (failure,) = report_json(PP2, samples, RunOutcome(stalls=(DRAIN_STALL,)))["failures"]
    assert failure["stack_file"] is None


def test_a_dump_without_the_loop_thread_is_kept_but_names_no_frame(
    make_series: MakeSeries, tmp_path: Path, stack_dump: str
) -> None:
    probe_only = stack_dump.split("\n\n")[0]
    stack_file(tmp_path, 0).write_text(probe_only)
    samples = {0: running(make_series, 0, 8.0), 1: make_series(1, n=100)}
    (failure,) = report_json(PP2, samples, RunOutcome(stalls=(DRAIN_STALL,)), tmp_path)["failures"]
    assert failure["stack_file"] == "rank-0.stacks.txt"
    assert failure["message"] == DRAIN_STALL.message


def test_a_rank_that_stopped_sampling_is_a_hang(make_series: MakeSeries) -> None:
    hang = Stall(1, 1001, "hang", "rank 1 stopped sampling 9.0 s ago (process unresponsive)", 5.0)
    samples = {0: make_series(0, n=100), 1: running(make_series, 1, 5.0)}
    (failure,) = report_json(PP2, samples, RunOutcome(stalls=(hang,)))["failures"]
    assert (failure["rank"], failure["kind"], failure["message"], failure["at_s"]) == (1, "hang", hang.message, 5.0)
    assert "waiting_on_pp" not in failure


# -- the root cause and its consequences -------------------------------------------------


def test_the_root_cause_is_the_earliest_of_independent_failures(make_series: MakeSeries) -> None:
    samples = {
        0: make_series(0, n=50, final_state="error", message="PPDesyncError: told to apply 3 write acks, only 1"),
        1: running(make_series, 1, 3.0),
    }
    report = report_json(PP2, samples, RunOutcome())
    assert failures_of(report) == [(1, "crash", None), (0, "error", None)]
    assert [f["at_s"] for f in report["failures"]] == [3.0, 5.0]
    assert report["root_cause"] == 1


def test_a_rank_stalled_on_a_stage_that_failed_follows_it_even_when_earlier(make_series: MakeSeries) -> None:
    samples = {0: running(make_series, 0, 8.0), 1: running(make_series, 1, 9.0)}
    report = report_json(PP2, samples, RunOutcome(stalls=(DRAIN_STALL, HUNG_BY_FAULT)))
    # rank 0's round began at 2.0 s, before rank 1's hang at 2.5 s, but it was waiting on rank 1
    assert failures_of(report) == [(1, "stall", None), (0, "stall", 1)]
    assert report["root_cause"] == 1
    assert all("waiting_on_pp" not in f for f in report["failures"])


def test_a_stall_on_a_killed_stage_is_a_consequence_of_the_kill(make_series: MakeSeries) -> None:
    samples = {0: running(make_series, 0, 8.0), 1: running(make_series, 1, 4.0)}
    outcome = RunOutcome(stalls=(DRAIN_STALL,), worker_exits={1: WorkerExit(1, -9, "SIGKILL")})
    report = report_json(PP2, samples, outcome)
    assert failures_of(report) == [(1, "crash", None), (0, "stall", 1)]
    assert report["root_cause"] == 1


def test_a_stall_on_a_stage_that_did_not_fail_is_its_own_failure(make_series: MakeSeries) -> None:
    config = StressConfig(pp=3, duration_s=10.0)
    samples = {0: running(make_series, 0, 8.0), 1: make_series(1, n=100), 2: running(make_series, 2, 5.0)}
    report = report_json(config, samples, RunOutcome(stalls=(DRAIN_STALL,)))
    assert failures_of(report) == [(0, "stall", None), (2, "crash", None)]
    assert report["root_cause"] == 0


def test_with_tp_the_stage_waited_on_maps_to_the_rank_that_failed_in_it(make_series: MakeSeries) -> None:
    config = StressConfig(pp=2, tp=2, duration_s=10.0)
    stalled = Stall(1, 1001, "stall", "rank 1 blocked in drain, waiting on isend to pp rank 1 for 6.0 s", 2.0, 1)
    samples = {
        0: make_series(0, n=100, tp=2),
        1: running(make_series, 1, 8.0, tp=2),
        2: make_series(2, n=100, tp=2),
        3: running(make_series, 3, 4.0, tp=2),  # pp rank 1, tp rank 1
    }
    outcome = RunOutcome(stalls=(stalled,), worker_exits={3: WorkerExit(3, -9, "SIGKILL")})
    report = report_json(config, samples, outcome)
    assert failures_of(report) == [(3, "crash", None), (1, "stall", 3)]


@pytest.mark.parametrize(
    "message",
    [
        CONNECTION_CLOSED,
        "RuntimeError: Connection reset by peer",
        "RuntimeError: Application timeout caused pair closure",
    ],
)
def test_a_connection_error_after_another_failure_is_its_consequence(make_series: MakeSeries, message: str) -> None:
    samples = {
        0: make_series(0, n=42, final_state="error", message=message, error=CONNECTION),
        1: running(make_series, 1, 4.0),
    }
    report = report_json(PP2, samples, RunOutcome(worker_exits={1: WorkerExit(1, -9, "SIGKILL")}))
    assert failures_of(report) == [(1, "crash", None), (0, "error", 1)]
    assert [f["at_s"] for f in report["failures"]] == [4.0, 4.2]
    assert report["root_cause"] == 1


def test_a_connection_error_before_any_other_failure_is_the_root_cause(make_series: MakeSeries) -> None:
    samples = {
        0: make_series(0, n=20, final_state="error", message=CONNECTION_CLOSED, error=CONNECTION),
        1: running(make_series, 1, 4.0),
    }
    report = report_json(PP2, samples, RunOutcome())
    assert failures_of(report) == [(0, "error", None), (1, "crash", None)]
    assert report["root_cause"] == 0


def test_a_lone_connection_error_is_the_root_cause(make_series: MakeSeries) -> None:
    samples = {
        0: make_series(0, n=42, final_state="error", message=CONNECTION_CLOSED, error=CONNECTION),
        1: make_series(1, n=100),
    }
    report = report_json(PP2, samples, RunOutcome())
    assert failures_of(report) == [(0, "error", None)]
    assert report["root_cause"] == 0


def test_an_error_that_is_not_about_the_connection_is_no_consequence(make_series: MakeSeries) -> None:
    samples = {
        0: make_series(0, n=42, final_state="error", message="InjectedWaitError: injected fault: wait() raised"),
        1: running(make_series, 1, 4.0),
    }
    report = report_json(PP2, samples, RunOutcome())
    assert failures_of(report) == [(1, "crash", None), (0, "error", None)]


def test_the_root_cause_is_never_itself_a_consequence(make_series: MakeSeries) -> None:
    # rank 0 waits on rank 1, which is not receiving; once rank 0 is gone rank 1's pair closes
    samples = {
        0: running(make_series, 0, 8.0),
        1: make_series(1, n=45, final_state="error", message=CONNECTION_CLOSED, error=CONNECTION),
    }
    report = report_json(PP2, samples, RunOutcome(stalls=(DRAIN_STALL,)))
    assert "consequence_of" not in report["failures"][0]
    assert failures_of(report) == [(1, "error", None), (0, "stall", 1)]
    assert report["root_cause"] == 1


# What `compare-policies` measured for `adaptive` (pp 2, 30 s, seed 0): its 1 ms probe wait
# timed out, gloo closed the pair, rank 1's recv saw the reset at 0.117 s, and rank 0 said so
# at its next isend, at 0.119 s.
PAIR_CLOSED_BY_TIMEOUT = (
    "ClosedAfterTimeout: isend to rank 1 failed: an earlier timed-out wait on a send to it closed the "
    "gloo connection (gloo closes a pair when a wait times out)"
)
RESET_BY_PEER = "RuntimeError: Read error [127.0.0.1]:64152: Connection reset by peer"


def adaptive_pair_closure(make_series: MakeSeries, pp: int = 2) -> dict[int, list[Sample]]:
    samples = {
        0: make_series(0, n=119, hz=1000.0, final_state="error", message=PAIR_CLOSED_BY_TIMEOUT, error=CLOSED_TO_1),
        1: make_series(1, n=117, hz=1000.0, final_state="error", message=RESET_BY_PEER, error=CONNECTION),
    }
    for rank in range(2, pp):  # further stages lose their upstream a little later
        samples[rank] = make_series(
            rank, n=118, hz=1000.0, final_state="error", message=CONNECTION_CLOSED, error=CONNECTION
        )
    return samples


def test_a_timeout_that_closed_the_pair_is_the_root_cause_of_its_peers_reset(make_series: MakeSeries) -> None:
    exits = {r: WorkerExit(r, 1, None) for r in (0, 1)}
    report = report_json(PP2, adaptive_pair_closure(make_series), RunOutcome(exit_code=1, worker_exits=exits))
    assert failures_of(report) == [(0, "error", None), (1, "error", 0)]
    assert [f["at_s"] for f in report["failures"]] == [0.119, 0.117]  # the times as measured
    assert report["root_cause"] == 0


def test_a_closed_pair_explains_every_connection_error_after_the_peers(make_series: MakeSeries) -> None:
    config = StressConfig(pp=3, duration_s=10.0)
    report = report_json(config, adaptive_pair_closure(make_series, pp=3), RunOutcome(exit_code=1))
    assert failures_of(report) == [(0, "error", None), (1, "error", 0), (2, "error", 0)]


def test_a_pair_closing_timeout_is_not_a_consequence_of_a_later_failure(make_series: MakeSeries) -> None:
    samples = {
        0: make_series(0, n=20, final_state="error", message=PAIR_CLOSED_BY_TIMEOUT, error=CLOSED_TO_1),
        1: running(make_series, 1, 4.0),
    }
    report = report_json(PP2, samples, RunOutcome(worker_exits={1: WorkerExit(1, -9, "SIGKILL")}))
    assert failures_of(report) == [(0, "error", None), (1, "crash", None)]


def test_a_completed_run_has_no_failures_and_no_root_cause(make_series: MakeSeries) -> None:
    report = report_json(PP2, {0: make_series(0, n=100), 1: make_series(1, n=100)}, RunOutcome())
    assert report["status"] == "completed"
    assert (report["failures"], report["root_cause"]) == ([], None)


# -- pp_consistency ----------------------------------------------------------------------


def with_digests(make_sample: MakeSample, rank: int, *per_sample: dict[str, int]) -> list[Sample]:
    return [make_sample(rank, t=float(i + 1), digests=d) for i, d in enumerate(per_sample)]


def test_equal_digests_at_shared_rounds_are_consistent(make_sample: MakeSample) -> None:
    samples = {
        0: with_digests(make_sample, 0, {"1024": 11}, {}, {"2048": 22, "3072": 33}),
        1: with_digests(make_sample, 1, {"1024": 11, "2048": 22}),
    }
    assert RunSeries.of(samples).digests.summary() == {
        "checked_rounds": 2,  # 3072 was reached by rank 0 only
        "last_checked_round": 2048,
        "consistent": True,
        "first_divergence": None,
    }


def test_a_differing_digest_is_the_first_divergence_with_every_ranks_digest(make_sample: MakeSample) -> None:
    samples = {
        0: with_digests(make_sample, 0, {"1024": 11}, {"2048": 22}, {"3072": 33}),
        1: with_digests(make_sample, 1, {"1024": 11}, {"2048": 23}, {"3072": 34}),
        2: with_digests(make_sample, 2, {"1024": 11}, {"2048": 22}),
    }
    result = RunSeries.of(samples).digests.summary()
    assert result["consistent"] is False
    assert result["checked_rounds"] == 3
    assert result["first_divergence"] == {"round": 2048, "digests": {"0": 22, "1": 23, "2": 22}}


def test_rounds_are_compared_as_numbers_not_strings(make_sample: MakeSample) -> None:
    samples = {
        0: with_digests(make_sample, 0, {"9216": 5}, {"10240": 6}),
        1: with_digests(make_sample, 1, {"9216": 5, "10240": 7}),
    }
    result = RunSeries.of(samples).digests.summary()
    assert result["first_divergence"]["round"] == 10240
    assert result["last_checked_round"] == 10240


def test_no_digests_check_nothing_and_are_consistent(make_sample: MakeSample, make_series: MakeSeries) -> None:
    expected = {"checked_rounds": 0, "last_checked_round": None, "consistent": True, "first_divergence": None}
    assert RunSeries.of({0: [make_sample(0)], 1: [make_sample(1)]}).digests.summary() == expected
    assert RunSeries.of({}).digests.summary() == expected
    assert (
        report_json(PP2, {0: make_series(0, n=50), 1: make_series(1, n=50)}, RunOutcome())["pp_consistency"] == expected
    )


def test_the_report_carries_pp_consistency(make_series: MakeSeries, make_sample: MakeSample) -> None:
    samples = {
        r: make_series(r, n=50)[:-1] + [make_sample(r, t=5.0, kind="final", state="done", digests={"1024": 40 + r})]
        for r in (0, 1)
    }
    report = report_json(PP2, samples, RunOutcome())
    assert report["pp_consistency"]["consistent"] is False
    assert report["pp_consistency"]["first_divergence"] == {"round": 1024, "digests": {"0": 40, "1": 41}}
    assert report["status"] == "completed"  # a divergence is reported, not a failure


# -- SGLang's own code: the stall's peer from its stack --------------------------------

SGLANG_PP2 = RunConfig(target=SGLangTarget(pp=2, version="0.5.15", class_name="HiRadixCache"), duration_s=10.0)
SGLANG_ROUND_STALL = Stall(0, 1000, "stall", "rank 0 blocked in its event round for 6.0 s", 2.0)
SGLANG_DRAIN_DUMP = """Current thread 0x00007f3ab1e4b740 (most recent call first):
  File "/cache/sglang/0.5.15/sglang/srt/mem_cache/hiradix_cache.py", line 242 in _drain_async_work
  File "/cache/sglang/0.5.15/sglang/srt/mem_cache/hiradix_cache.py", line 1396 in check_hicache_events
  File "/repo/hicache_cli/sglang_target/bind.py", line 160 in run_round
  File "/repo/hicache_cli/rank/entry.py", line 200 in run_loop
"""


@pytest.mark.parametrize(
    ("config", "dump", "consequence"),
    [
        (SGLANG_PP2, SGLANG_DRAIN_DUMP, 1),  # in SGLang's drain: waiting on the next stage
        (SGLANG_PP2, SGLANG_DRAIN_DUMP.replace("_drain_async_work", "writing_check"), None),
        (PP2, SGLANG_DRAIN_DUMP, None),  # the model says where it waits itself, in blocked_on
    ],
    ids=["sglang drain", "sglang elsewhere", "model"],
)
def test_an_sglang_rank_stalled_in_its_drain_is_a_consequence_of_the_next_stage(
    make_series: MakeSeries, tmp_path: Path, config: StressConfig, dump: str, consequence: int | None
) -> None:
    stack_file(tmp_path, 0).write_text(dump)
    samples = {0: running(make_series, 0, 8.0), 1: running(make_series, 1, 9.0)}
    report = report_json(config, samples, RunOutcome(stalls=(SGLANG_ROUND_STALL, HUNG_BY_FAULT)), tmp_path)
    by_rank = {f["rank"]: f for f in report["failures"]}
    assert by_rank[0].get("consequence_of") == consequence
    assert report["root_cause"] == (1 if consequence == 1 else 0)


# -- what kind of error: decided in the rank, where the exception is known -------------------------


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (RuntimeError("Connection closed by peer [127.0.0.1]:41234"), CONNECTION),
        (RuntimeError("Read error [127.0.0.1]:64152: Connection reset by peer"), CONNECTION),
        (RuntimeError("Application timeout caused pair closure"), CONNECTION),
        (ConnectionResetError("reset"), CONNECTION),
        (RuntimeError("told to apply 3 write acks, only 1"), (ErrorKind.RAISED, None)),
    ],
)
def test_the_rank_names_its_errors_kind(error: BaseException, kind: tuple[str, int | None]) -> None:
    assert error_kind(error) == kind


def test_a_closed_pair_names_its_peer_by_the_exceptions_type_not_its_text() -> None:
    from hicache_model.pp_sync import ClosedAfterTimeout

    assert error_kind(ClosedAfterTimeout(3)) == (ErrorKind.CLOSED_AFTER_TIMEOUT, 3)
    assert error_kind(RuntimeError(PAIR_CLOSED_BY_TIMEOUT))[0] != ErrorKind.CLOSED_AFTER_TIMEOUT  # the words alone: no


def test_the_report_keeps_an_errors_kind_and_peer(make_series: MakeSeries) -> None:
    report = report_json(PP2, adaptive_pair_closure(make_series), RunOutcome(exit_code=1))
    first, second = report["failures"]
    assert (first["error_kind"], first["peer"]) == ("closed-after-timeout", 1)
    assert (second["error_kind"], "peer" in second) == ("connection", False)
