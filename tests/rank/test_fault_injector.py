"""rank.FaultInjector: a rank's --fault plan fired between rounds; rank._one_line: errors in one line."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from hicache_cli.rank import entry as rank_module
from hicache_cli.rank.entry import FaultInjector, _one_line
from hicache_cli.rank.probe import LoopStats
from hicache_model.faults import FaultPlan
from hicache_model.work_list import InjectedWaitError, WorkList
from tests.fakes import FakeWork, RecordingWorkList, work_list_of

REAL_SLEEP = time.sleep


def injector(
    *specs: str, work_list: RecordingWorkList | WorkList | None = None, stats: LoopStats | None = None
) -> FaultInjector:
    """Rank 1's injector in a pp=2 run with these --fault specs."""
    plan = FaultPlan.for_rank(list(specs), rank=1, world_size=2)
    return FaultInjector(plan, work_list if work_list is not None else RecordingWorkList(), stats or LoopStats())


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """os.kill as hicache_cli.rank.entry calls it, recorded instead of sent."""
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(rank_module.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    return sent


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """time.sleep as hicache_cli.rank.entry calls it, recorded and not slept."""
    slept: list[float] = []
    monkeypatch.setattr(rank_module.time, "sleep", slept.append)
    return slept


# -- lag -------------------------------------------------------------------------------


def test_lag_sleeps_its_total_before_every_round(sleeps: list[float]) -> None:
    inject = injector("lag:1:5", "lag:1:2ms", "lag:0:100")
    inject(0.0)
    inject(0.5)
    inject(100.0)
    assert sleeps == pytest.approx([0.007, 0.007, 0.007])


def test_without_a_lag_nothing_sleeps(sleeps: list[float], kills: list[tuple[int, int]]) -> None:
    work_list = RecordingWorkList()
    inject = injector("kill:0:1s", work_list=work_list)  # rank 0's fault: not ours
    inject(0.0)
    inject(5.0)
    assert sleeps == []
    assert kills == []
    assert work_list.blocked_history == []


# -- kill --------------------------------------------------------------------------------


def test_kill_sigkills_the_rank_itself_once_when_its_time_comes(kills: list[tuple[int, int]]) -> None:
    inject = injector("kill:1:4s")
    inject(3.9)
    assert kills == []
    inject(4.0)
    assert kills == [(os.getpid(), signal.SIGKILL)]
    inject(4.1)
    inject(60.0)
    assert len(kills) == 1


# -- raise-in-wait ------------------------------------------------------------------------


def test_raise_in_wait_makes_the_next_wait_raise_once() -> None:
    works = work_list_of(FakeWork(), FakeWork())
    inject = injector("raise-in-wait:1:3s", work_list=works)
    inject(2.9)
    assert works.fail_next_wait is False
    inject(3.0)
    assert works.fail_next_wait is True

    first, second = list(works)
    with pytest.raises(InjectedWaitError):
        works.wait(first, where="drain")
    works.wait(second, where="drain")
    inject(4.0)  # fired once: later rounds wait normally
    assert works.fail_next_wait is False


# -- stall and hang -------------------------------------------------------------------------


def test_a_stall_pauses_the_loop_naming_the_fault_then_clears_it(monkeypatch: pytest.MonkeyPatch) -> None:
    work_list, stats = RecordingWorkList(), LoopStats(round_started=0.0)
    seen_while_paused: list[str | None] = []

    def sleep_and_look(seconds: float) -> None:
        seen_while_paused.append(work_list.blocked_on)
        REAL_SLEEP(seconds)

    monkeypatch.setattr(rank_module.time, "sleep", sleep_and_look)
    inject = injector("stall:1:1s:50ms", work_list=work_list, stats=stats)
    inject(0.5)
    assert work_list.blocked_history == []

    before = time.perf_counter()
    inject(1.0)

    assert seen_while_paused and set(seen_while_paused) == {"injected fault stall:1:1s:50ms"}
    assert work_list.blocked_history == ["injected fault stall:1:1s:50ms", None]
    assert work_list.blocked_on is None
    assert stats.round_started >= before  # the pause shows as a round that began when it did
    inject(2.0)
    assert work_list.blocked_history == ["injected fault stall:1:1s:50ms", None]  # once only


def test_a_stall_ends_at_once_when_the_rank_is_asked_to_stop() -> None:
    work_list, stats = RecordingWorkList(), LoopStats(stop_requested=True)
    injector("stall:1:0:2s", work_list=work_list, stats=stats)(0.0)  # would otherwise pause 2 s
    assert work_list.blocked_history == ["injected fault stall:1:0:2s", None]


def test_a_hang_lasts_until_the_rank_is_asked_to_stop() -> None:
    work_list, stats = RecordingWorkList(), LoopStats()
    paused = threading.Event()
    work_list.on_blocked = lambda value: value is not None and paused.set()
    loop = threading.Thread(target=injector("hang:1:2s", work_list=work_list, stats=stats), args=(2.5,), daemon=True)
    loop.start()
    assert paused.wait(timeout=5.0)
    loop.join(timeout=0.08)
    assert loop.is_alive()  # no time limit: still hanging
    assert work_list.blocked_on == "injected fault hang:1:2s"

    stats.stop_requested = True
    loop.join(timeout=5.0)
    assert not loop.is_alive()
    assert work_list.blocked_history == ["injected fault hang:1:2s", None]


def test_faults_due_together_fire_in_plan_order(monkeypatch: pytest.MonkeyPatch) -> None:
    works = WorkList()
    seen_at_kill: list[bool] = []
    monkeypatch.setattr(rank_module.os, "kill", lambda pid, sig: seen_at_kill.append(works.fail_next_wait))
    injector("raise-in-wait:1:1s", "kill:1:1s", work_list=works)(1.0)
    assert seen_at_kill == [True]  # raise-in-wait, listed first, had fired when kill did


# -- _one_line -----------------------------------------------------------------------------


def test_one_line_drops_the_gloo_source_location() -> None:
    exc = RuntimeError(
        "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Connection closed by peer [127.0.0.1]:41234"
    )
    assert _one_line(exc) == "RuntimeError: Connection closed by peer [127.0.0.1]:41234"


def test_one_line_drops_the_gloo_advice_and_later_lines() -> None:
    exc = RuntimeError(
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:41234. "
        "This is typically caused by a crash or an abort of the peer process.\n"
        "Exception raised from recv at ../torch/csrc/distributed/c10d/ProcessGroupGloo.cpp:123"
    )
    assert _one_line(exc) == "RuntimeError: Connection closed by peer [127.0.0.1]:41234"


def test_one_line_keeps_a_plain_message_and_names_the_type() -> None:
    exc = InjectedWaitError("injected fault: wait() on isend to rank 1 raised")
    assert _one_line(exc) == "InjectedWaitError: injected fault: wait() on isend to rank 1 raised"
    assert _one_line(RuntimeError("")) == "RuntimeError: "


def test_one_line_is_at_most_300_characters() -> None:
    line = _one_line(RuntimeError("x" * 1000))
    assert len(line) == 300
    assert line.startswith("RuntimeError: xxx")
