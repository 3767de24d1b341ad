"""WorkList: the outstanding PP-sync sends, the bytes they keep alive, and waiting on them."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch

from hicache_model.work_list import PendingSend, WaitTimedOut, WorkList
from tests.fakes import FakeWork, pending_send, work_list_of


def test_held_bytes_follow_append_popleft_and_clear() -> None:
    works = WorkList()
    works.append(pending_send(FakeWork(), elements=1))  # int32[1]: one count
    works.append(pending_send(FakeWork(), elements=2))  # int32[2]: a batched pair
    works.append(PendingSend(FakeWork(), torch.zeros(3, dtype=torch.int64), peer=1, sent_at=0.0))
    assert len(works) == 3
    assert works.held_bytes == 4 + 8 + 24

    works.popleft()
    assert works.held_bytes == 8 + 24
    assert works.released == 1

    works.clear()
    assert len(works) == 0
    assert works.held_bytes == 0
    assert works.released == 3


def test_head_and_popleft_are_oldest_first() -> None:
    first, second = FakeWork(), FakeWork()
    works = work_list_of(first, second)
    assert works.head().work is first
    assert works.popleft().work is first
    assert works.head().work is second


def test_iteration_is_a_snapshot_so_the_list_can_change_meanwhile() -> None:
    works = work_list_of(FakeWork(), FakeWork(), FakeWork())
    seen = 0
    for _ in works:
        works.popleft()
        seen += 1
    assert seen == 3 and len(works) == 0


def test_wait_without_timeout_waits_on_the_work() -> None:
    work = FakeWork(received=False)
    works = work_list_of(work)
    works.wait(works.head())
    assert work.timeouts == [None]
    assert work.is_completed()
    assert works.waits == 1
    assert len(works) == 1  # waiting releases nothing by itself


def test_wait_passes_its_timeout_as_a_timedelta() -> None:
    work = FakeWork()
    works = work_list_of(work)
    works.wait(works.head(), timeout_s=0.25)
    assert work.timeouts == [timedelta(seconds=0.25)]


def test_a_timed_out_wait_raises_wait_timed_out_naming_the_peer() -> None:
    works = work_list_of(FakeWork(received=False), peer=5)
    with pytest.raises(WaitTimedOut, match="rank 5") as info:
        works.wait(works.head(), timeout_s=0.001)
    assert info.value.peer == 5
    assert info.value.waited_s >= 0.0
    assert isinstance(info.value.__cause__, RuntimeError)
    assert isinstance(info.value, RuntimeError)


def test_any_other_wait_error_passes_through_unchanged() -> None:
    works = work_list_of(FakeWork(error="Connection reset by peer"))
    with pytest.raises(RuntimeError, match="Connection reset by peer") as info:
        works.wait(works.head(), timeout_s=1.0)
    assert not isinstance(info.value, WaitTimedOut)


def test_blocked_on_names_the_peer_during_a_wait_and_clears_after() -> None:
    ok, broken = FakeWork(), FakeWork(error="Connection closed by peer")
    works = WorkList()
    works.append(pending_send(ok, peer=3))
    works.append(pending_send(broken, peer=4))
    during: list[tuple[str | None, int | None]] = []
    ok.on_wait = lambda: during.append((works.blocked_on, works.blocked_peer))
    broken.on_wait = lambda: during.append((works.blocked_on, works.blocked_peer))

    works.wait(works.head())
    assert works.blocked_on is None and works.blocked_peer is None
    with pytest.raises(RuntimeError):
        works.wait(list(works)[1])
    assert works.blocked_on is None and works.blocked_peer is None
    assert during == [("wait, waiting on isend to pp rank 3", 3), ("wait, waiting on isend to pp rank 4", 4)]


def test_only_a_timed_out_wait_marks_its_peer_as_closed() -> None:
    """On gloo a timed-out wait closes the connection: the list remembers which peer that was."""
    works = WorkList()
    works.append(pending_send(FakeWork(received=False), peer=2))
    works.append(pending_send(FakeWork(error="Connection reset by peer"), peer=3))
    sends = list(works)
    with pytest.raises(WaitTimedOut):
        works.wait(sends[0], timeout_s=0.001)
    with pytest.raises(RuntimeError):
        works.wait(sends[1], timeout_s=0.001)
    assert works.timed_out_peers == {2}


def test_keep_every_holds_every_kth_released_work_forever() -> None:
    works = work_list_of(*(FakeWork() for _ in range(10)))
    works.keep_every = 3
    works.clear()
    assert works.released == 10
    assert len(works) == 3  # the 3rd, 6th and 9th stay: an injected leak
    assert works.held_bytes == 3 * 4
