"""tracer.messages: every point-to-point message counted per peer and group, blocking or not,
through works.install's patches on stand-in classes (a ProcessGroup's send/recv, a Work's
wait), called through torch.distributed-like functions (tests/tracer/test_works.py's c10d)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from hicache_cli.tracer import messages, works
from hicache_cli.tracer.works import WorkTable
from tests.fakes import FakeTracedWork
from tests.tracer.test_works import TORCH, c10d


class Work:
    """Stands for c10d.Work: wait() and is_completed(), patched by works.install."""

    def wait(self) -> bool:
        return True

    def is_completed(self) -> bool:
        return False


def group_class(work: type = Work) -> type:
    """A fresh stand-in for c10d.ProcessGroup (install patches a class once), handing out `work`s."""

    class Group:
        def __init__(self, name: str = "0") -> None:
            self.group_name = name

        def send(self, tensors: list[Any], dst: int, tag: int) -> Work:
            if dst < 0:
                raise RuntimeError("invalid destination")
            return work()

        def recv(self, tensors: list[Any], src: int, tag: int) -> Work:
            return work()

    return Group


@pytest.fixture
def group() -> Any:
    table = WorkTable(skip_prefixes=(TORCH,))
    cls = group_class()
    works.install(table, cls, type("W", (Work,), {}), lambda g, r: r + 10)  # global rank = group rank + 10
    g = cls()
    g.table = table
    return g


def tensor(nbytes: int) -> Any:
    return FakeTracedWork.tensor(nbytes)


def test_blocking_and_async_messages_are_counted_per_peer(group: Any) -> None:
    table: WorkTable = group.table
    kept = [c10d["isend"](tensor(8), 1, group) for _ in range(3)]  # handed to the program
    for _ in range(2):
        c10d["recv"](tensor(8), 1, group)  # blocking: torch waits the Work itself
    pending = c10d["irecv"](tensor(4), 2, group)
    assert table.messages.snapshot() == [[11, "0", 3, 24, 2, 16], [12, "0", 0, 0, 1, 4]]
    totals = table.totals()
    assert (totals.sent, totals.received) == (3, 3)  # the blocking receives too
    assert totals.live == 4  # the Works the program holds: 3 sends and the irecv; not the blocking ones
    del kept, pending


def test_groups_are_told_apart(group: Any) -> None:
    other = type(group)("1")
    other.table = group.table
    c10d["isend"](tensor(8), 1, group)
    c10d["isend"](tensor(8), 1, other)
    assert group.table.messages.snapshot() == [[11, "0", 1, 8, 0, 0], [11, "1", 1, 8, 0, 0]]


def test_a_send_that_raises_counts_nothing(group: Any) -> None:
    with pytest.raises(RuntimeError):
        group.send([tensor(8)], -1, 0)
    assert group.table.messages.snapshot() == []


def test_a_forked_child_starts_from_nothing_and_still_counts(group: Any) -> None:
    table: WorkTable = group.table
    c10d["isend"](tensor(8), 1, group)
    held = table.messages.sent
    table.reset()
    assert table.messages.snapshot() == [] and table.messages.sent is held  # emptied in place
    c10d["isend"](tensor(8), 1, group)
    assert table.messages.snapshot() == [[11, "0", 1, 8, 0, 0]]


def test_peers_beyond_the_limit_are_pooled(group: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(messages, "MAX_PEERS", 2)
    for peer in range(4):
        c10d["isend"](tensor(1), peer, group)
    rows = group.table.messages.snapshot()
    assert rows == [[-1, "(other)", 2, 2, 0, 0], [10, "0", 1, 1, 0, 0], [11, "0", 1, 1, 0, 0]]


def test_a_group_without_a_name_or_a_global_rank_still_counts() -> None:
    counts = messages.PeerMessages(to_global=lambda g, r: (_ for _ in ()).throw(RuntimeError("not in group")))
    row = counts.counter(counts.sent, object(), 3)
    row[0] += 1
    assert counts.snapshot() == [[3, "?", 1, 0, 0, 0]]


def test_a_blocking_recv_is_named_while_torch_waits_it() -> None:
    """What the probe reads while the program is stuck in dist.recv: the op, the peer and the
    program's line (a blocking call is never a counted Work)."""
    table = WorkTable(skip_prefixes=(TORCH,))
    seen: list[tuple[str | None, int | None]] = []

    class Waiting(Work):
        def wait(self) -> bool:
            seen.append((table.blocked_on, table.blocked_peer))
            return True

    cls = group_class(Waiting)
    works.install(table, cls, Waiting, lambda g, r: r + 10)
    line = sys._getframe().f_lineno + 1
    c10d["recv"](tensor(8), 1, cls())
    assert seen == [(f"recv from rank 11 at test_messages.py:{line}", 11)]
    assert (table.blocked_on, table.blocked_peer) == (None, None)  # not blocked any more
    assert table.counts()["created"] == 0
