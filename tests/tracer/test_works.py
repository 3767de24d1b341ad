"""tracer.works: Works counted by creation site, on fakes (tests/fakes.py says what they mimic).

Site attribution is tested with functions compiled under torch-like file names, so the
frame walk sees exactly what it sees in a real program: user code calling
torch.distributed's `isend`, which calls a ProcessGroup method.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest

from hicache_cli.tracer import works
from hicache_cli.tracer.works import OTHER, WorkTable
from tests.fakes import FakeTracedGroup, FakeTracedWork

TORCH = "/fake/site-packages/torch/"
C10D = TORCH + "distributed/distributed_c10d.py"

# torch.distributed's public functions, as far as the frame walk cares: they call the group.
_C10D_SOURCE = """
def isend(tensor, dst, group):
    return group.send([tensor], dst, 0)

def recv(tensor, src, group):
    work = irecv(tensor, src, group)
    work.wait()
    return src

def irecv(tensor, src, group):
    return group.recv([tensor], src, 0)

def batch_isend_irecv(ops):
    return [op[0](op[1], op[2], op[3]) for op in ops]

def all_reduce(tensor, group, async_op=False):
    work = group.recv([tensor], 0, 0)  # stands for group.allreduce: a Work either way
    if async_op:
        return work
    work.wait()

def _private_helper(tensor, dst, group):
    return group.send([tensor], dst, 0)
"""
c10d: dict[str, Any] = {}
exec(compile(_C10D_SOURCE, C10D, "exec"), c10d)


@pytest.fixture
def table() -> WorkTable:
    table = WorkTable(skip_prefixes=(TORCH,))
    FakeTracedGroup.table = table  # the fake group reports what it creates, as the patches do
    return table


def _line() -> int:
    return sys._getframe(1).f_lineno


def test_an_isend_is_attributed_to_the_user_line_with_its_op_and_peer(table: WorkTable) -> None:
    group = FakeTracedGroup()
    line = _line() + 1
    work = c10d["isend"]([1.0, 2.0], 1, group)
    (site,) = table.top_sites()
    assert (site["file"], site["line"], site["function"]) == (__file__, line, _this_function())
    assert (site["op"], site["peer"], site["created"], site["live"]) == ("isend", 1, 1, 1)
    assert table.counts() == {"created": 1, "waited": 0, "completed": 0, "dropped": 0, "live": 1, "ops": 1}
    assert table.totals().sent == 1
    del work


def _this_function() -> str:
    return "test_an_isend_is_attributed_to_the_user_line_with_its_op_and_peer"


def test_a_site_carries_its_line_of_source(table: WorkTable) -> None:
    """The page and the report show the line itself; code without a file has none."""
    group = FakeTracedGroup()
    kept = c10d["isend"]([1.0], 1, group)  # the line the site must quote
    (site,) = table.top_sites()
    assert site["source"] == 'kept = c10d["isend"]([1.0], 1, group)  # the line the site must quote'
    exec(compile("more = isend([1.0], 2, group)", "<string>", "exec"), {"isend": c10d["isend"], "group": group})
    assert {s["peer"]: s["source"] for s in table.top_sites()}[2] is None
    del kept


def test_the_op_is_the_call_the_program_made(table: WorkTable) -> None:
    group = FakeTracedGroup()
    works_ = c10d["batch_isend_irecv"]([(c10d["isend"], [1.0], 1, group), (c10d["irecv"], [0.0], 1, group)])
    kept = c10d["irecv"]([0.0], 1, group)
    ops = sorted(s["op"] for s in table.top_sites())
    assert ops == ["batch_isend_irecv(irecv)", "batch_isend_irecv(isend)", "irecv"]
    assert table.totals().received == 2
    del works_, kept


def test_works_that_torch_waits_itself_are_not_the_programs(table: WorkTable) -> None:
    """recv() is irecv().wait() inside torch; a collective without async_op waits too: the
    program never holds those Works, so they are not counted (and cost only the walk)."""
    group = FakeTracedGroup()
    c10d["recv"]([0.0], 0, group)
    c10d["all_reduce"]([0.0], group)
    assert table.counts()["created"] == 0 and table.top_sites() == []
    work = c10d["all_reduce"]([0.0], group, async_op=True)
    (site,) = table.top_sites()
    assert (site["op"], site["live"]) == ("all_reduce", 1)
    del work


def test_a_private_torch_helper_is_not_the_op(table: WorkTable) -> None:
    c10d["_private_helper"]([1.0], 3, FakeTracedGroup())
    (site,) = table.top_sites()
    assert site["op"] == "send"  # the group method it reached: no public function on the way


def test_a_function_that_hides_itself_is_walked_through(table: WorkTable) -> None:
    def wrapper(tensor: Any, dst: int, group: Any) -> Any:
        __tracebackhide__ = True  # as pytest's helpers, and hicache's own counting wrappers
        return c10d["isend"](tensor, dst, group)

    line = _line() + 1
    work = wrapper([1.0], 1, FakeTracedGroup())
    (site,) = table.top_sites()
    assert site["line"] == line
    del work


def test_waited_works_leave_the_live_count_once(table: WorkTable) -> None:
    work = c10d["isend"]([1.0], 1, FakeTracedGroup())
    work.wait()
    work.wait()  # a second wait is not a second Work
    assert table.counts() == {"created": 1, "waited": 1, "completed": 1, "dropped": 0, "live": 0, "ops": 1}


def test_a_work_dropped_without_a_wait_is_dropped_not_live(table: WorkTable) -> None:
    work = c10d["isend"]([1.0], 1, FakeTracedGroup())
    del work
    gc.collect()
    counts = table.counts()
    assert (counts["dropped"], counts["live"], counts["waited"]) == (1, 0, 0)
    assert table.top_sites()[0]["live_max"] == 1


def test_the_table_never_keeps_a_work_alive(table: WorkTable) -> None:
    import weakref

    work = c10d["isend"]([1.0], 1, FakeTracedGroup())
    ref = weakref.ref(work)
    del work
    gc.collect()
    assert ref() is None


def test_polling_counts_completion_but_only_a_wait_ends_liveness(table: WorkTable) -> None:
    work = c10d["isend"]([1.0], 1, FakeTracedGroup())
    work.done = True
    assert work.is_completed()
    assert work.is_completed()
    counts = table.counts()
    assert (counts["completed"], counts["live"]) == (1, 1)  # still held by the program, never waited


def test_sites_are_bounded(table: WorkTable) -> None:
    small = WorkTable(skip_prefixes=(TORCH,), max_sites=3)
    FakeTracedGroup.table = small
    group = FakeTracedGroup()
    kept = [c10d["isend"]([1.0], peer, group) for peer in range(10)]  # ten sites: one per peer
    keys = {(s["file"], s["op"], s["peer"]) for s in small.top_sites(50)}
    assert len(small.sites) == 4  # three sites, and the pool of the rest
    assert (OTHER[0], OTHER[3], OTHER[4]) in keys
    assert small.counts()["live"] == 10  # counted all the same
    del kept


def test_live_bytes_follow_the_tensors_of_live_sends(table: WorkTable) -> None:
    """Bytes are counted per site, by the size of the first Work made there (a site sends
    the same message every round): an estimate that keeps each Work's cost down."""
    group = FakeTracedGroup()
    kept = [c10d["isend"](FakeTracedWork.tensor(64), 1, group) for _ in range(3)]
    assert table.totals().live_bytes == 192
    kept.pop().wait()
    assert table.totals().live_bytes == 128
    assert table.top_sites()[0]["live_bytes"] == 128
    del kept


def test_install_patches_the_classes_once_and_keeps_what_they_return(table: WorkTable) -> None:
    class Group:
        def send(self, tensors: list[Any], dst: int, tag: int) -> FakeTracedWork:
            return FakeTracedWork()

        def barrier(self) -> FakeTracedWork:
            return FakeTracedWork()

        def rank(self) -> int:  # not a Work method: left alone
            return 0

    class Work:
        def wait(self) -> bool:
            return True

        def is_completed(self) -> bool:
            return False

    rank = Group.rank
    patched = works.install(table, Group, Work, lambda group, r: r + 10)
    assert sorted(patched) == ["barrier", "send"]
    assert works.install(table, Group, Work, lambda group, r: r) == []  # once
    assert Group.rank is rank
    work = Group().send([FakeTracedWork.tensor(8)], 1, 0)
    assert isinstance(work, FakeTracedWork)
    site = table.top_sites()[0]
    assert (site["op"], site["peer"], site["live_bytes"]) == ("send", 11, 8)  # the group rank made global


def test_every_work_returning_call_is_an_op_those_torch_waits_itself_too(table: WorkTable) -> None:
    """A blocking recv or all_reduce never hands its Work to the program (not created), but it
    is the process making progress (analysis/progress.py)."""
    group = FakeTracedGroup()
    c10d["recv"]([0.0], 1, group)
    c10d["all_reduce"]([0.0], group)
    assert table.counts()["created"] == 0 and table.counts()["ops"] == 2
    c10d["isend"]([1.0], 1, group)
    assert (table.counts()["created"], table.counts()["ops"]) == (1, 3)
    table.reset()
    assert table.counts()["ops"] == 0
