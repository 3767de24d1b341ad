"""watchdog: stalls and hangs read off synthetic samples, and the blocked frame off a stack dump."""

from __future__ import annotations

import faulthandler
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from hicache_cli.protocol import stacks_file as stack_file
from hicache_cli.sample import Sample
from hicache_cli.watchdog import Stall, blocked_frame, find_stalls

MakeSample = Callable[..., Sample]
TIMEOUT_S = 5.0
HANG_AFTER_S = 3.0


def stalls_at(samples: dict[int, list[Sample]], now_wall: float) -> list[Stall]:
    return find_stalls(samples, now_wall, stall_timeout_s=TIMEOUT_S, hang_after_s=HANG_AFTER_S)


# -- find_stalls ---------------------------------------------------------------------


def test_a_round_older_than_the_timeout_is_a_stall_naming_where_and_how_long(make_sample: MakeSample) -> None:
    last = make_sample(
        0, t=10.0, pid=4242, round_age_s=6.0, blocked_on="drain, waiting on isend to pp rank 1", blocked_peer=1
    )
    stalls = stalls_at({0: [make_sample(0, t=9.9, round_age_s=5.9), last]}, now_wall=last.wall)
    assert stalls == [
        Stall(
            rank=0,
            pid=4242,
            kind="stall",
            message="rank 0 blocked in drain, waiting on isend to pp rank 1 for 6.0 s",
            since_t=4.0,
            waiting_on_pp=1,
        )
    ]


def test_a_stall_counts_the_time_since_the_last_sample_too(make_sample: MakeSample) -> None:
    last = make_sample(0, t=10.0, round_age_s=6.0, blocked_on="drain, waiting on isend to pp rank 1")
    (stall,) = stalls_at({0: [last]}, now_wall=last.wall + 1.5)  # silent, but not yet hung
    assert stall.kind == "stall"
    assert stall.message.endswith("for 7.5 s")
    assert stall.since_t == 4.0  # when its round began, whenever we look


def test_a_round_just_at_the_timeout_is_a_stall_and_one_just_below_is_not(make_sample: MakeSample) -> None:
    at = make_sample(0, t=10.0, round_age_s=TIMEOUT_S)
    below = make_sample(1, t=10.0, round_age_s=TIMEOUT_S - 0.1)
    assert [s.rank for s in stalls_at({0: [at], 1: [below]}, now_wall=at.wall)] == [0]


@pytest.mark.parametrize(
    ("blocked_on", "pp", "where"),
    [
        ("PP sync, waiting in recv from pp rank 0", 0, "PP sync, waiting in recv from pp rank 0"),
        ("bounded-drain, waiting on isend to pp rank 12", 12, "bounded-drain, waiting on isend to pp rank 12"),
        ("injected fault hang:1:2s", None, "injected fault hang:1:2s"),
        (None, None, "its event round"),
    ],
)
def test_a_stall_says_which_stage_it_waits_on_when_it_knows(
    make_sample: MakeSample, blocked_on: str | None, pp: int | None, where: str
) -> None:
    last = make_sample(1, t=8.0, round_age_s=7.0, blocked_on=blocked_on, blocked_peer=pp)
    (stall,) = stalls_at({1: [last]}, now_wall=last.wall)
    assert stall.waiting_on_pp == pp
    assert stall.message == f"rank 1 blocked in {where} for 7.0 s"


def test_a_rank_that_stopped_sampling_is_a_hang(make_sample: MakeSample) -> None:
    last = make_sample(1, t=4.0, pid=77, round_age_s=0.001, blocked_on="drain, waiting on isend to pp rank 2")
    stalls = stalls_at({1: [make_sample(1, t=3.9), last]}, now_wall=last.wall + 10.0)
    assert stalls == [Stall(1, 77, "hang", "rank 1 stopped sampling 10.0 s ago (process unresponsive)", since_t=4.0)]


def test_a_short_silence_with_a_young_round_is_nothing(make_sample: MakeSample) -> None:
    last = make_sample(0, t=4.0, round_age_s=0.001)
    assert stalls_at({0: [last]}, now_wall=last.wall + HANG_AFTER_S - 0.5) == []


@pytest.mark.parametrize(
    ("kind", "state"),
    [("final", "done"), ("final", "error"), ("final", "interrupted"), ("sample", "stopping"), ("sample", "starting")],
)
def test_finished_stopping_or_starting_ranks_are_never_reported(make_sample: MakeSample, kind: str, state: str) -> None:
    last = make_sample(0, t=10.0, state=state, kind=kind, round_age_s=60.0, blocked_on="drain, waiting on isend")
    assert stalls_at({0: [last]}, now_wall=last.wall + 600.0) == []


def test_only_stuck_ranks_are_reported_in_rank_order(make_sample: MakeSample) -> None:
    wall = make_sample(0, t=10.0).wall
    samples = {
        2: [make_sample(2, t=10.0, round_age_s=9.0)],
        0: [make_sample(0, t=10.0, round_age_s=6.0)],
        1: [make_sample(1, t=10.0, round_age_s=0.001)],
        3: [],
    }
    assert [(s.rank, s.kind) for s in stalls_at(samples, now_wall=wall)] == [(0, "stall"), (2, "stall")]


# -- blocked_frame ---------------------------------------------------------------------


LOOP_THREAD = 0x00007F3AB1E4B740  # the main thread of conftest's dump: where the rank runs its rounds
PROBE_THREAD = 0x00007F3A9BFFF640


def test_blocked_frame_is_the_innermost_frame_of_the_loop_thread(stack_dump: str) -> None:
    assert blocked_frame(stack_dump, LOOP_THREAD) == "wait (work_list.py:100)"


def test_blocked_frame_is_the_thread_the_samples_name_whatever_its_functions_are(stack_dump: str) -> None:
    """No function name is looked for: another thread named as the loop's is the one read."""
    assert blocked_frame(stack_dump, PROBE_THREAD) == "_sample_until_stopped (probe.py:199)"
    renamed = stack_dump.replace(" in run_loop", " in serve_forever")
    assert blocked_frame(renamed, LOOP_THREAD) == "wait (work_list.py:100)"


def test_blocked_frame_finds_the_loop_thread_wherever_it_is_listed(stack_dump: str) -> None:
    probe, copier, main = stack_dump.split("\n\n")
    as_other_thread = main.replace("Current thread", "Thread")  # the probe thread took the signal
    as_current = probe.replace("Thread", "Current thread")
    dump = "\n".join((as_current + "\n", as_other_thread + "\n", copier))
    assert blocked_frame(dump, LOOP_THREAD) == "wait (work_list.py:100)"


def test_blocked_frame_is_none_without_the_loop_thread(stack_dump: str) -> None:
    probe, copier, _ = stack_dump.split("\n\n")
    assert blocked_frame("\n".join((probe + "\n", copier)), LOOP_THREAD) is None  # not in the dump
    assert blocked_frame(stack_dump, None) is None  # the rank never said (it never started its loop)
    assert blocked_frame("", LOOP_THREAD) is None


def _dump_stacks_here(path: Path) -> int:
    line = sys._getframe().f_lineno + 2
    with path.open("w", encoding="utf-8") as fh:
        faulthandler.dump_traceback(file=fh, all_threads=True)
    return line


def test_blocked_frame_reads_a_real_faulthandler_dump(tmp_path: Path) -> None:
    """faulthandler names each thread by threading.get_ident(), which a loop's samples carry."""
    path = stack_file(tmp_path, 3)
    line = _dump_stacks_here(path)
    assert path.name == "rank-3.stacks.txt"
    assert blocked_frame(path.read_text(), threading.get_ident()) == f"_dump_stacks_here (test_watchdog.py:{line})"
