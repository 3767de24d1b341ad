"""Judging a marked test from its ranks' ends and samples (pure; synthetic series)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from hicache_cli.pytest_ranks.protocol import Outcome
from hicache_cli.pytest_ranks.results import (
    RankEnd,
    RankOutcome,
    RanksResult,
    assess,
    innermost_test_frame,
    live_max_of,
    over_live_limit,
    stack_excerpt,
)
from hicache_cli.pytest_ranks.spec import RanksSpec
from hicache_cli.sample import Sample
from hicache_cli.series import RunSeries

TEST_FILE = "/t/test_pp.py"
RUN_DIR = Path("/runs/test_reap0")
ISEND = {"file": TEST_FILE, "line": 13, "function": "test_reap", "op": "isend", "peer": 1}
RECV = {"file": TEST_FILE, "line": 17, "function": "test_reap", "op": "recv", "peer": 0}


def site(where: dict[str, Any], created: int, waited: int, live: int, live_max: int) -> dict[str, Any]:
    return {**where, "created": created, "waited": waited, "completed": waited, "dropped": created - waited - live,
            "live": live, "live_max": live_max, "live_bytes": 0}  # fmt: skip


def sample(t: float, live: int, sites: list[dict[str, Any]] | None = None, rss: int = 300_000_000, rank: int = 0,
           kind: str = "sample") -> Sample:  # fmt: skip
    works = {"created": live, "waited": 0, "completed": 0, "dropped": 0, "live": live}
    return Sample(t=t, wall=1_000.0 + t, rank=rank, pp_rank=rank, tp_rank=0, pid=100 + rank, state="running",
                  rss_bytes=rss, depth=live, held_bytes=0, rounds=0, lat_p50_ms=None, lat_p99_ms=None,
                  lat_max_ms=None, lat_count=0, round_age_s=0.0, sent=0, received=0, works=works, sites=sites,
                  kind=kind)  # fmt: skip


def passed(rank: int, started: float = 10.0, ended: float = 11.0) -> RankEnd:
    return RankEnd(rank, 100 + rank, RankOutcome.PASSED, Outcome(rank, 100 + rank, "passed", body_started=started,
                                                                 body_ended=ended))  # fmt: skip


def raised(rank: int, ended: float, error: str = "ValueError: boom") -> RankEnd:
    trace = f'Traceback (most recent call last):\n  File "{TEST_FILE}", line 9, in test_x\n    raise ValueError\n'
    trace += f"{error}\n"
    return RankEnd(rank, 100 + rank, RankOutcome.FAILED, Outcome(rank, 100 + rank, "failed", error, trace, 10.0, ended))


def judge(
    spec: RanksSpec, ends: list[RankEnd], samples: RunSeries | dict[int, list[Sample]] | None = None
) -> RanksResult:
    return assess(spec, "test_pp.py::test_x", TEST_FILE, ends, samples or {}, RUN_DIR, 3.0, spawned_wall=7.5)


def test_a_rank_that_keeps_its_sends_fails_naming_the_isend_line() -> None:
    series = [sample(0.1 * i, 30 * i, [site(ISEND, 30 * i, 0, 30 * i, 30 * i)]) for i in range(1, 11)]
    result = judge(RanksSpec(2, max_live_works=8), [passed(0), passed(1)], {0: series, 1: [sample(0.1, 0, rank=1)]})
    assert not result.passed
    assert result.failures == (
        "rank 0 held 300 Works it had not waited (max_live_works=8), 300 of them from "
        "test_pp.py:13 in test_reap (isend to rank 1); at the end: 300 created, 0 waited, 300 still held",
    )
    assert result.message.endswith(f"\nrun directory: {RUN_DIR}")
    rank0 = result.rank(0)
    assert (rank0.live_max, rank0.live_final, rank0.created, rank0.waited) == (300, 300, 300, 0)
    assert rank0.top_site is not None and rank0.top_site.where() == "test_pp.py:13 in test_reap (isend to rank 1)"


def test_a_leak_released_between_two_samples_is_caught_by_its_sites_peak() -> None:
    """A short body can build and drop its list between samples: the site's live_max holds it."""
    final = sample(0.15, 0, [site(ISEND, 50, 0, 0, 50), site(RECV, 0, 0, 0, 0)], kind="final")
    final = replace(final, works={"created": 50, "waited": 0, "completed": 0, "dropped": 50, "live": 0})
    result = judge(RanksSpec(2, max_live_works=8), [passed(0), passed(1)], {0: [sample(0.1, 0), final]})
    assert result.rank(0).live_max == 50 and result.rank(0).live_final == 0
    assert result.failures[0] == ("rank 0 held 50 Works it had not waited (max_live_works=8), 50 of them from "
                                  "test_pp.py:13 in test_reap (isend to rank 1); at the end: 50 created, 0 waited, "
                                  "50 dropped without a wait, 0 still held")  # fmt: skip
    run = RunSeries.of({0: [sample(0.1, 0), final]})
    assert over_live_limit(run, 8)
    assert not over_live_limit(run, 50)
    assert not over_live_limit(run, None)


def test_the_live_limit_holds_a_peak_the_thinned_history_dropped() -> None:
    """A test running for minutes: its history is thinned, the peak stays in the totals."""
    run = RunSeries(kept_max=8)
    for i in range(100):
        run.add(0, sample(0.1 * i, 9 if i == 37 else 3))
        if i == 36:
            assert not over_live_limit(run, 8)
    assert all(s.depth == 3 for s in run.samples[0]) and len(run.samples[0]) <= 9
    assert over_live_limit(run, 8)
    assert live_max_of(run.ranks[0]) == 9
    result = judge(RanksSpec(2, max_live_works=8), [passed(0), passed(1)], run)
    assert result.rank(0).live_max == 9 and result.rank(0).samples == 100 and not result.passed


def test_a_draining_rank_passes_and_max_live_works_none_only_counts() -> None:
    series = [sample(0.1 * i, 1, [site(ISEND, 10 * i, 10 * i - 1, 1, 1)]) for i in range(1, 30)]
    ok = judge(RanksSpec(2, max_live_works=1), [passed(0), passed(1)], {0: series})
    assert ok.passed and ok.failures == () and ok.skipped is None
    leaky = [sample(0.1 * i, 100 * i) for i in range(1, 5)]
    unchecked = judge(RanksSpec(2, max_live_works=None), [passed(0), passed(1)], {0: leaky})
    assert unchecked.passed and unchecked.rank(0).live_max == 400


def test_the_earliest_exception_comes_first_with_its_traceback_and_stopped_ranks_last() -> None:
    stopped = RankEnd(2, 102, RankOutcome.STOPPED, stack=DUMP)
    result = judge(RanksSpec(3), [raised(0, ended=12.0, error="RuntimeError: peer gone"), raised(1, ended=11.0),
                                  stopped])  # fmt: skip
    first, second, third = result.failures
    assert first.startswith("rank 1 raised ValueError: boom\n    Traceback (most recent call last):")
    assert f'    File "{TEST_FILE}", line 9, in test_x' in first
    assert second == "rank 0 raised RuntimeError: peer gone"  # a consequence, most likely: one line
    assert third == "rank 2 (pid 102) was stopped once the test had failed, at test_pp.py:13 in test_hangs"
    assert result.rank(2).outcome is RankOutcome.STOPPED


def test_a_hung_rank_shows_its_stack_without_hicaches_frames() -> None:
    result = judge(RanksSpec(2, timeout_s=3.0), [passed(0), RankEnd(1, 101, RankOutcome.TIMED_OUT, stack=DUMP)])
    (failure,) = result.failures
    assert failure.splitlines() == [
        "rank 1 (pid 101) did not finish within the 3 s timeout; its stack (most recent call first):",
        '    File "/v/torch/distributed/distributed_c10d.py", line 2799 in recv',
        '    File "/v/torch/distributed/c10d_logger.py", line 83 in wrapper',
        f'    File "{TEST_FILE}", line 13 in test_hangs',
    ]


def test_a_rank_stuck_before_its_body_says_so() -> None:
    dump = ("Current thread 0x00007f (most recent call first):\n"
            '  File "/v/torch/distributed/rendezvous.py", line 70 in _rendezvous\n'
            '  File "/x/hicache_cli/pytest_ranks/runner.py", line 140 in start_process_group\n'
            '  File "/x/hicache_cli/pytest_ranks/runner.py", line 76 in run\n')  # fmt: skip
    end = RankEnd(1, 101, RankOutcome.TIMED_OUT, stack=dump, in_body=False)
    (failure,) = judge(RanksSpec(2), [passed(0), end]).failures
    assert "did not reach its test body (start-up: interpreter, imports, rendezvous) in time" in failure
    assert failure.splitlines()[1:] == ['    File "/v/torch/distributed/rendezvous.py", line 70 in _rendezvous',
                                        '    File "/x/hicache_cli/pytest_ranks/runner.py", line 140 in '
                                        "start_process_group"]  # fmt: skip


def test_a_crash_names_the_signal_or_exit_code_and_shows_the_last_output() -> None:
    killed = RankEnd(0, 100, RankOutcome.CRASHED, exit_code=-9, log_tail="Fatal Python error: Segmentation fault")
    exited = RankEnd(1, 101, RankOutcome.CRASHED, exit_code=3)
    first, second = judge(RanksSpec(2), [killed, exited]).failures
    assert first == ("rank 0 (pid 100) died of SIGKILL before its test body returned; its last output:\n"
                     "    Fatal Python error: Segmentation fault")  # fmt: skip
    assert second == "rank 1 (pid 101) exited with code 3 before its test body returned"


def test_a_crash_comes_before_the_broken_connection_it_caused_in_another_rank() -> None:
    """rank 0 os._exit(3)s; rank 1's recv then fails with gloo's "Connection closed by peer":
    the crash is the root cause, said first (pytest's one-line summary shows the first)."""
    crashed = RankEnd(0, 100, RankOutcome.CRASHED, exit_code=3)
    lost = "RuntimeError: [pair.cc:534] Connection closed by peer [127.0.0.1]:1234"
    broken = raised(1, 11.0, lost)
    broken = replace(broken, reported=replace(broken.reported, error_kind="connection"))
    first, second = judge(RanksSpec(2), [crashed, broken]).failures
    assert first == "rank 0 (pid 100) exited with code 3 before its test body returned"
    assert second.startswith(f"rank 1 raised {lost}\n    Traceback")  # the first traceback said is its
    own = raised(1, 11.0)  # an error of the body's own comes before a crash, as before
    assert judge(RanksSpec(2), [crashed, own]).failures[0].startswith("rank 1 raised ValueError: boom")


def test_skips() -> None:
    skipped = RankEnd(0, 100, RankOutcome.SKIPPED, Outcome(0, 100, "skipped", "Skipped: needs 4 GPUs"))
    assert judge(RanksSpec(2), [skipped, passed(1)]).skipped == "needs 4 GPUs"
    mixed = judge(RanksSpec(2), [skipped, raised(1, 11.0)])
    assert mixed.skipped is None and not mixed.passed


def test_rss_growth_fails_only_when_a_limit_is_given() -> None:
    growing = [sample(0.1 * i, 0, rss=300_000_000 + 100_000 * i) for i in range(100)]  # 1 MB/s = 3600 MB/h
    unchecked = judge(RanksSpec(2), [passed(0), passed(1)], {0: growing})
    # memory grows while no Work does: no Work leak (issue 25), so only a limit fails it
    assert unchecked.passed and (unchecked.rank(0).verdict, unchecked.rank(0).cause) == ("INCONCLUSIVE", "memory")
    slope = unchecked.rank(0).rss_slope_mb_per_h
    assert slope is not None and abs(slope - 3600.0) < 1.0
    lo, hi = unchecked.rank(0).rss_slope_ci_mb_per_h or (0.0, 0.0)
    assert lo <= slope <= hi
    (failure,) = judge(RanksSpec(2, max_rss_slope_mb_per_h=50.0), [passed(0), passed(1)], {0: growing}).failures
    assert failure.startswith("rank 0: memory grows, not from Works or messages: RSS +3600 MB/h [95% ")
    assert failure.endswith("while live Works stay at most 0 and no message backlog grows (max_rss_slope=50 MB/h)")
    flat = [sample(0.1 * i, 0, rss=300_000_000 + 4096 * (i % 2)) for i in range(100)]
    assert judge(RanksSpec(2, max_rss_slope_mb_per_h=50.0), [passed(0), passed(1)], {0: flat}).rank(0).verdict == (
        "BOUNDED")  # fmt: skip


def test_timings_and_the_summary_properties() -> None:
    result = judge(RanksSpec(2), [passed(0, started=10.0, ended=10.5), passed(1, started=10.2, ended=10.5)])
    assert result.startup_s is not None and abs(result.startup_s - 2.7) < 1e-9  # the last body's start
    assert result.rank(0).body_s == 0.5
    summary = json.loads(json.dumps(result.summary()))
    assert summary["forked"] == 0
    assert summary["ranks"][1] == {"rank": 1, "outcome": "passed", "live_max": 0, "live_final": 0, "created": 0,
                                   "waited": 0, "top_site": None, "verdict": "INCONCLUSIVE"}  # fmt: skip
    stuck = judge(RanksSpec(2), [passed(0), RankEnd(1, 101, RankOutcome.TIMED_OUT, in_body=False)])
    assert stuck.startup_s is None


DUMP = f"""Thread 0x00007fb315a7b6c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait
  File "/x/hicache_cli/tracer/session.py", line 89 in _sample_until_stopped
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007fb33a264b80 (most recent call first):
  File "/x/hicache_cli/tracer/works.py", line 399 in wait
  File "/v/torch/distributed/distributed_c10d.py", line 2799 in recv
  File "/v/torch/distributed/c10d_logger.py", line 83 in wrapper
  File "{TEST_FILE}", line 13 in test_hangs
  File "/x/hicache_cli/pytest_ranks/runner.py", line 77 in run
  File "/x/hicache_cli/pytest_ranks/runner.py", line 58 in main
  File "<frozen runpy>", line 88 in _run_code
"""


def test_reading_a_stack_dump() -> None:
    assert stack_excerpt(DUMP, TEST_FILE).splitlines()[-1] == f'File "{TEST_FILE}", line 13 in test_hangs'
    assert innermost_test_frame(DUMP, TEST_FILE) == "test_pp.py:13 in test_hangs"
    assert innermost_test_frame(DUMP, "/elsewhere.py") is None
    assert stack_excerpt("", TEST_FILE) == ""


# -- shutdown hazards (issue 25) --------------------------------------------------------

UNWAITED = [{"peer": 1, "count": 1, "file": TEST_FILE, "line": 15, "function": "test_x", "op": "isend"}]


def returned_holding_sends(rank: int) -> RankEnd:
    reported = Outcome(rank, 100 + rank, "passed", body_started=10.0, body_ended=11.0, unwaited_sends=UNWAITED)
    return RankEnd(rank, 100 + rank, RankOutcome.PASSED, reported)


def test_a_body_that_returns_with_an_unwaited_send_fails_naming_it_and_its_blocked_peer() -> None:
    blocked = replace(sample(0.5, 0, rank=1), blocked_on="recv from rank 0 at test_pp.py:17", blocked_peer=0)
    stopped = RankEnd(1, 101, RankOutcome.STOPPED, stack="")
    result = judge(RanksSpec(2), [returned_holding_sends(0), stopped], {1: [blocked]})
    assert result.failures == (
        "rank 0 returned with 1 send to rank 1 never waited (test_pp.py:15)",
        "rank 1 is blocked in recv from rank 0 at test_pp.py:17",
    )
    assert result.rank(0).unwaited_sends == tuple(UNWAITED)


def test_the_hazard_fails_whether_or_not_the_message_arrived() -> None:
    result = judge(RanksSpec(2), [returned_holding_sends(0), passed(1)])
    assert result.failures == ("rank 0 returned with 1 send to rank 1 never waited (test_pp.py:15)",)


def test_allow_unwaited_sends_opts_out() -> None:
    assert judge(RanksSpec(2, allow_unwaited_sends=True), [returned_holding_sends(0), passed(1)]).passed
