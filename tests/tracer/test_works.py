"""tracer.works: Works counted by creation site, on fakes (tests/fakes.py says what they mimic).

Site attribution is tested with functions compiled under torch-like file names, so the
frame walk sees exactly what it sees in a real program: user code calling
torch.distributed's `isend`, which calls a ProcessGroup method.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import sys
import warnings
from typing import Any

import pytest
import typing_extensions

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


def _forwarded(fn: Any) -> Any:
    """A program's own decorator that only passes the call on (timing, logging, retries)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


class _Logged(contextlib.ContextDecorator):
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _method_wrapper(fn: Any) -> Any:
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(self, *args, **kwargs)

    return wrapper


@pytest.mark.parametrize(
    "decorate",
    [
        pytest.param(typing_extensions.deprecated("use isend"), id="typing_extensions.deprecated"),
        pytest.param(_forwarded, id="functools.wraps"),
        pytest.param(_Logged(), id="contextlib.ContextDecorator"),
        pytest.param(lambda fn: _forwarded(_forwarded(fn)), id="two-wrappers"),
    ],
)
def test_a_decorators_wrapper_around_torch_is_walked_through(table: WorkTable, decorate: Any) -> None:
    """torch 2.13 wraps all_gather_into_tensor and reduce_scatter_tensor in typing_extensions'
    @deprecated: its wrapper frame sits between torch's frames and the program's line."""
    isend = decorate(c10d["isend"])
    line = _line() + 2
    with warnings.catch_warnings(record=True):
        work = isend([1.0], 1, FakeTracedGroup())
    (site,) = table.top_sites()
    assert (site["file"], site["line"], site["op"]) == (__file__, line, "isend")
    del work


def test_a_wrapper_that_makes_its_own_work_is_the_line(table: WorkTable) -> None:
    """Only a frame stopped at its forwarding call is passed through; a Work the wrapper
    makes itself is its own line's."""

    def announcing(fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            wrapper.notice = c10d["isend"]([0.0], 2, FakeTracedGroup())  # the wrapper's own Work
            return fn(*args, **kwargs)

        return wrapper

    line = _line() + 1
    work = announcing(c10d["isend"])([1.0], 1, FakeTracedGroup())
    by_peer = {s["peer"]: (s["function"], s["line"]) for s in table.top_sites()}
    assert by_peer == {2: ("wrapper", _marked("# the wrapper's own Work")), 1: (_test_name(), line)}
    del work


def _marked(text: str) -> int:
    """The line of this file that holds `text` (once, besides this call)."""
    with open(__file__, encoding="utf-8") as source:
        lines = [n for n, line in enumerate(source, 1) if text in line and "_marked(" not in line]
    assert len(lines) == 1, lines
    return lines[0]


def _test_name() -> str:
    return sys._getframe(1).f_code.co_name


def test_forwarding_is_told_by_the_code_not_its_name() -> None:
    def passes_on(*args: Any, **kwargs: Any) -> Any:
        return print(*args, **kwargs)

    def keeps_kwargs(*args: Any, **kwargs: Any) -> Any:
        return print(*args)

    def takes_named(a: Any, b: Any = None) -> Any:
        return print(a, b)

    assert works.forwarding(passes_on.__code__)
    assert works.forwarding(_method_wrapper(print).__code__)  # fn(self, *args, **kwargs)
    assert works.forwarding(keeps_kwargs.__code__) is None
    assert works.forwarding(takes_named.__code__) is None


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


TENSOR = FakeTracedWork.tensor(16)


class _GlooWork:
    """Mimics a gloo send Work (measured on torch 2.13: is_completed() stays False until
    wait(), even once the peer has the message); installed on by works.install."""

    def __init__(self) -> None:
        self.waited = False

    def wait(self) -> bool:
        self.waited = True
        return True

    def is_completed(self) -> bool:
        return self.waited


@pytest.fixture
def installed(table: WorkTable) -> Any:
    """A group class of its own (install patches the class it is given), whose sends hand
    out _GlooWork."""

    class Group:
        def send(self, tensors: list[Any], dst: int, tag: int) -> _GlooWork:
            return Work()

        def name(self) -> str:
            return "gloo"

    class Work(_GlooWork):
        wait = _GlooWork.wait
        is_completed = _GlooWork.is_completed

    works.install(table, Group, Work, lambda group, r: r)
    return Group


def test_a_polling_reaper_is_noted_with_its_line(table: WorkTable, installed: Any) -> None:
    group = installed()
    pending = [c10d["isend"](TENSOR, 1, group) for _ in range(3)]
    pending = [w for w in pending if not w.is_completed()]  # <- the reaper's poll
    (site,) = table.top_sites()
    assert site["polled"] == {"file": __file__, "line": _marked("# <- the reaper's poll"), "function": _test_name()}
    assert (site["backend"], site["completed"], site["live"]) == ("gloo", 0, 3)
    pending[0].wait()
    assert pending[0].is_completed()
    assert table.top_sites()[0]["completed"] == 1  # true once waited: seen complete, counted once
    del pending


def test_a_work_never_polled_has_no_poll_line(table: WorkTable, installed: Any) -> None:
    work = c10d["isend"](TENSOR, 1, installed())
    work.wait()
    (site,) = table.top_sites()
    assert site["polled"] is None and site["completed"] == 1


def test_a_poll_through_a_helper_in_torch_is_the_programs_line(table: WorkTable, installed: Any) -> None:
    done = {}
    exec(compile("def done(w):\n    return w.is_completed()\n", TORCH + "helpers.py", "exec"), done)
    work = c10d["isend"](TENSOR, 1, installed())
    done["done"](work)  # <- polled through torch's helper
    assert table.top_sites()[0]["polled"]["line"] == _marked("# <- polled through torch's helper")
    del work


def test_a_poll_of_a_work_made_before_the_tracer_is_noted_by_the_process(table: WorkTable, installed: Any) -> None:
    """hicache attach: a prefix reaper polls only its oldest Work, made before the attach."""
    old = installed().send([TENSOR], 1, 0)  # made by the group directly: no site counted it
    table._refs.clear()  # ... as if before the tracer came
    for _ in range(3):
        old.is_completed()  # <- polling a Work from before
    assert table.polled_before == [__file__, _marked("# <- polling a Work from before"), _test_name(), 3, 0]
