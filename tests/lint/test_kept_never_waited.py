"""HC001: a Work kept in a list or attribute that nothing in the module waits. True positives
across the ways a Work is made and kept; true negatives across the ways code waits it."""

from __future__ import annotations

import pytest

from tests.lint.conftest import line_of, lint_snippet, rule_lines

# The shape of SGLang 0.5.14's HiRadixCache: isend, append, a reaper that only polls.
SGLANG_0_5_14 = """
import torch


class HiRadixCache:
    def __init__(self):
        self.work_list = []

    def _reap_completed_async_work(self):
        count = 0
        while count < len(self.work_list) and self.work_list[count].is_completed():
            count += 1
        if count > 0:
            self.work_list = self.work_list[count:]

    def _pp_sync(self, data):
        copy_of_data = data.clone()
        send_work = torch.distributed.isend(
            copy_of_data, group_dst=self.pp_rank + 1, group=self.pp_group, tag=2
        )
        self.work_list.append(send_work)
"""

# The shape of 0.5.15 on: the same sends, waited and cleared at the start of each round.
SGLANG_0_5_15 = """
import torch


class HiRadixCache:
    def __init__(self):
        self.work_list = []

    def _drain_async_work(self):
        for work in self.work_list:
            work.wait()
        self.work_list.clear()

    def _pp_sync(self, data):
        send_work = torch.distributed.isend(data.clone(), group_dst=self.pp_rank + 1, group=self.pp_group)
        self.work_list.append(send_work)
"""


def test_the_sglang_0_5_14_shape_is_found_at_the_isend() -> None:
    [finding] = lint_snippet(SGLANG_0_5_14, "HC001")
    assert finding.rule == "HC001"
    assert finding.line == line_of(SGLANG_0_5_14, "torch.distributed.isend(")
    assert finding.end_line == finding.line + 2  # the call spans three lines
    assert finding.function == "HiRadixCache._pp_sync"
    store, poll = line_of(SGLANG_0_5_14, ".append(send_work)"), line_of(SGLANG_0_5_14, "is_completed")
    assert f"kept in self.work_list (line {store})" in finding.message
    assert f"only polled with is_completed() (line {poll}, HiRadixCache._reap_completed_async_work)" in finding.message


def test_the_sglang_0_5_15_shape_is_clean() -> None:
    assert lint_snippet(SGLANG_0_5_15, "HC001") == []


POSITIVES = {
    "irecv kept in an attribute": """
        import torch.distributed as dist
        class C:
            def __init__(self):
                self.recvs = []
            def step(self, buf):
                self.recvs.append(dist.irecv(buf, 0))  # HERE
        """,
    "batch_isend_irecv extended into a list": """
        import torch.distributed as dist
        class C:
            def __init__(self):
                self.pending = []
            def step(self, ops):
                self.pending.extend(dist.batch_isend_irecv(ops))  # HERE
        """,
    "a collective with async_op=True": """
        import torch.distributed as dist
        class C:
            def __init__(self):
                self.handles = []
            def step(self, t):
                self.handles.append(dist.all_reduce(t, async_op=True))  # HERE
        """,
    "an imported, renamed isend": """
        from torch.distributed import isend as send_async
        class C:
            def __init__(self):
                self.queue = []
            def step(self, t):
                self.queue.append(send_async(t, 1))  # HERE
        """,
    "the full torch.distributed path": """
        import torch
        class C:
            def __init__(self):
                self.queue = []
            def step(self, t):
                work = torch.distributed.isend(t, 1)  # HERE
                self.queue.append(work)
        """,
    "distributed_c10d's isend": """
        from torch.distributed import distributed_c10d as c10d
        class C:
            def __init__(self):
                self.queue = []
            def step(self, t):
                self.queue.append(c10d.isend(t, 1))  # HERE
        """,
    "a group-style wrapper's isend": """
        class C:
            def __init__(self, group):
                self.group = group
                self.queue = []
            def step(self, t):
                self.queue.append(self.group.isend(t, 1))  # HERE
        """,
    "a group's collective with async_op=True": """
        class C:
            def __init__(self, group):
                self.group = group
                self.queue = []
            def step(self, t):
                self.queue.append(self.group.all_gather_into_tensor(t, t, async_op=True))  # HERE
        """,
    "a module-level list": """
        import torch.distributed as dist
        PENDING = []
        def sync(t):
            PENDING.append(dist.isend(t, 1))  # HERE
        def reap():
            while PENDING and PENDING[0].is_completed():
                PENDING.pop(0)
        """,
    "a local list in a scheduler's while loop": """
        import torch.distributed as dist
        def main(t):
            pending = []
            while True:
                pending.append(dist.isend(t, 1))  # HERE
                pending = [w for w in pending if not w.is_completed()]
        """,
    "a dict of Works by key": """
        import torch.distributed as dist
        class C:
            def __init__(self):
                self.inflight = {}
            def step(self, key, t):
                self.inflight[key] = dist.isend(t, 1)  # HERE
        """,
    "a private helper that returns the Work": """
        import torch.distributed as dist
        class C:
            def __init__(self):
                self.works = []
            def _send(self, t):
                return dist.isend(t, 1)
            def step(self, t):
                self.works.append(self._send(t))  # HERE: the call of the helper, whose Work is kept
        """,
    "an alias of isend chosen at run time": """
        import torch.distributed as dist
        class C:
            def __init__(self):
                self.works = []
            def step(self, t, async_send):
                send = dist.isend if async_send else dist.send
                self.works.append(send(t, 1))  # HERE
        """,
    "kept by a helper object of this module that only polls": """
        import torch.distributed as dist
        class Tracker:
            def __init__(self):
                self.pending = []
            def add(self, work):
                self.pending.append(work)
            def reap(self):
                self.pending = [w for w in self.pending if not w.is_completed()]
        class C:
            def __init__(self):
                self.tracker = Tracker()
            def step(self, t):
                self.tracker.add(dist.isend(t, 1))  # HERE
        """,
    "a single attribute, replaced every round": """
        import torch.distributed as dist
        class C:
            def __init__(self):
                self.last = None
            def step(self, t):
                self.last = dist.isend(t, 1)  # HERE
                return self.last.is_completed()
        """,
}


@pytest.mark.parametrize("source", POSITIVES.values(), ids=POSITIVES.keys())
def test_kept_and_never_waited_is_found(source: str) -> None:
    assert rule_lines(source, "HC001") == [("HC001", line_of(source, "# HERE"))]


def test_only_the_unwaited_element_of_an_unpacked_batch_is_found() -> None:
    source = """
        import torch.distributed as dist
        class Exchanger:
            def __init__(self):
                self.sent = []
            def exchange(self, ops):
                send_work, recv_work = dist.batch_isend_irecv(ops)
                recv_work.wait()
                self.sent.append(send_work)
        """
    [finding] = lint_snippet(source, "HC001")
    assert finding.message.startswith("the send_work Work from batch_isend_irecv is kept in self.sent")
    assert "nothing in the program waits it" in finding.message


def test_a_bounded_deque_in_a_while_loop_is_found_and_not_called_growing() -> None:
    # tests/integration/programs/telemetry_stream.py's shape: never waited (HC001), but a
    # deque(maxlen=8) drops its oldest Works instead of growing, and the message says so.
    source = """
        import collections
        import torch.distributed as dist
        def sender(t):
            recent = collections.deque(maxlen=8)
            while True:
                recent.append(dist.isend(t, 1))  # HERE
        """
    [finding] = lint_snippet(source, "HC001")
    assert finding.line == line_of(source, "# HERE")
    assert "kept in recent, a deque(maxlen=8) filled on every pass of the while loop at line 6" in finding.message
    assert "which drops its oldest Works unwaited" in finding.message
    assert "grows" not in finding.message
    unbounded = source.replace("collections.deque(maxlen=8)", "collections.deque(maxlen=None)")
    [finding] = lint_snippet(unbounded, "HC001")
    assert "recent, a local that grows on every pass of the while loop at line 6" in finding.message


NEGATIVES = {
    "waited in another method": SGLANG_0_5_15,
    "waited by a helper loop": """
        import torch.distributed as dist
        def _wait_all(works):
            for w in works:
                w.wait()
        class C:
            def __init__(self):
                self.works = []
            def step(self, t):
                self.works.append(dist.isend(t, 1))
            def flush(self):
                _wait_all(self.works)
                self.works.clear()
        """,
    "torch.futures.wait_all on their futures": """
        import torch
        import torch.distributed as dist
        class C:
            def __init__(self):
                self.works = []
            def step(self, t):
                self.works.append(dist.isend(t, 1))
            def flush(self):
                torch.futures.wait_all([w.get_future() for w in self.works])
                self.works = []
        """,
    "returned to the caller": """
        import torch.distributed as dist
        def send_all(tensors):
            works = []
            for t in tensors:
                works.append(dist.isend(t, 1))
            return works
        """,
    "swapped out, then waited": """
        import torch.distributed as dist
        class C:
            def __init__(self):
                self.pending = []
            def step(self, t):
                self.pending.append(dist.isend(t, 1))
            def drain(self):
                pending, self.pending = self.pending, []
                for w in pending:
                    w.wait()
        """,
    "popped and waited": """
        import torch.distributed as dist
        class C:
            def __init__(self):
                self.works = []
            def step(self, t):
                self.works.append(dist.isend(t, 1))
            def drain(self):
                while self.works:
                    self.works.pop(0).wait()
        """,
    "the oldest waited with a timeout (FlexKV's reaper)": """
        import torch.distributed as dist
        class Comm:
            def __init__(self):
                self._async_works = []
            def _isend(self, t):
                return [dist.isend(t, 1), dist.isend(t, 2)]
            def scatter(self, t):
                works = []
                works.extend(self._isend(t))
                self._async_works.extend(works)
            def reap(self):
                w = self._async_works[0]
                w.wait(self.PROBE)
                self._async_works.pop(0)
        """,
    "kept in a dataclass, waited through its field": """
        from dataclasses import dataclass
        import torch.distributed as dist
        @dataclass
        class Pending:
            work: object
            tensor: object
        class C:
            def __init__(self):
                self.sends = []
            def step(self, t):
                self.sends.append(Pending(dist.isend(t, 1), t))
            def drain(self):
                for p in self.sends:
                    p.work.wait()
        """,
    "kept in an attribute this module never assigns (a mixin's host owns it)": """
        import torch.distributed as dist
        class SyncMixin:
            def step(self, t):
                self.work_list.append(dist.isend(t, 1))
        """,
    "a local list filled in a for loop (bounded, freed on return)": """
        import torch.distributed as dist
        def fan_out(t, dsts):
            works = []
            for d in dsts:
                works.append(dist.isend(t, d))
            while not all(w.is_completed() for w in works):
                pass
        """,
    "waited where it is made": """
        import torch.distributed as dist
        class C:
            def __init__(self):
                self.log = []
            def step(self, t):
                dist.isend(t, 1).wait()
                w = dist.irecv(t, 0)
                self.log.append(w)
                w.wait()
        """,
    "not asynchronous: async_op=False, or not known": """
        import torch.distributed as dist
        class C:
            def __init__(self):
                self.results = []
            def step(self, t, flag):
                self.results.append(dist.all_reduce(t, async_op=False))
                self.results.append(dist.all_reduce(t, async_op=flag))
                self.results.append(dist.send(t, 1))
        """,
    "pipelining's dict of lists, waited by peer": """
        import torch.distributed as dist
        def _batch_p2p(ops):
            return dist.batch_isend_irecv(ops)
        def _sorted_batch_p2p(ops):
            work_by_peer = {}
            for peer, group in ops:
                work_by_peer[peer] = _batch_p2p(group)
            return work_by_peer
        def _wait_batch_p2p(work):
            for w in work:
                w.wait()
        class Schedule:
            def __init__(self):
                self.sends_to_wait = []
            def step(self, ops):
                works = _sorted_batch_p2p(ops)
                self.sends_to_wait.extend(works.values())
            def finish(self):
                for work in self.sends_to_wait:
                    _wait_batch_p2p(work)
        """,
    "waited in a callback": """
        import torch.distributed as dist
        class C:
            def __init__(self):
                self.works = []
            def step(self, t, fut):
                self.works.append(dist.isend(t, 1))
                fut.then(lambda _: [w.wait() for w in self.works])
        """,
    "kept by a helper object of this module, which waits it": """
        import torch.distributed as dist
        class Tracker:
            def __init__(self):
                self.pending = []
            def add(self, work):
                self.pending.append(work)
            def flush(self):
                for w in self.pending:
                    w.wait()
        class C:
            def __init__(self):
                self.tracker = Tracker()
            def step(self, t):
                self.tracker.add(dist.isend(t, 1))
        """,
    "handed to code this module cannot see": """
        import torch.distributed as dist
        class C:
            def __init__(self, pool):
                self.works = []
                self.pool = pool
            def step(self, t):
                self.works.append(dist.isend(t, 1))
                self.pool.submit(self.works)
        """,
}


@pytest.mark.parametrize("source", NEGATIVES.values(), ids=NEGATIVES.keys())
def test_waited_or_not_kept_is_clean(source: str) -> None:
    assert lint_snippet(source, "HC001") == []


def test_a_local_reused_for_another_work_counts_as_waited() -> None:
    """A documented limit: a name is one place, whatever it held before (docs/lint.md)."""
    source = """
        import torch.distributed as dist
        class C:
            def __init__(self):
                self.sent = []
            def step(self, t, buf):
                work = dist.isend(t, 1)
                self.sent.append(work)
                work = dist.irecv(buf, 0)
                work.wait()
        """
    assert lint_snippet(source, "HC001") == []


def test_a_polling_reaper_with_a_final_wait_in_the_same_class_is_clean() -> None:
    source = SGLANG_0_5_14 + (
        "\n    def shutdown(self):\n        for work in self.work_list:\n            work.wait()\n"
    )
    assert lint_snippet(source, "HC001") == []


def test_the_fix_is_told_by_what_it_does_not_by_its_name() -> None:
    renamed = SGLANG_0_5_15.replace("_drain_async_work", "_settle_round")
    assert lint_snippet(renamed, "HC001") == []
    without_wait = SGLANG_0_5_15.replace("            work.wait()\n", "            pass\n")
    assert [f.rule for f in lint_snippet(without_wait, "HC001")] == ["HC001"]


def test_a_wrapper_this_module_defines_is_followed_not_assumed() -> None:
    """`self.comm.isend(t)` is this module's Comm.isend, which waits: no Work leaves it."""
    source = """
        import torch.distributed as dist
        class Comm:
            def isend(self, t):
                dist.isend(t, 1).wait()
        class C:
            def __init__(self):
                self.comm = Comm()
                self.sent = []
            def step(self, t):
                self.sent.append(self.comm.isend(t))
        """
    assert lint_snippet(source, "HC001") == []


def test_an_object_keeping_its_own_work_list_is_not_called_a_record() -> None:
    # SGLang 0.5.13's UnifiedRadixCache is held in StreamingSession.inner: the Work is kept in the
    # cache's own work_list, and the cache is no record built with the Work.
    source = (
        SGLANG_0_5_14
        + """

class StreamingSession:
    def __init__(self):
        self.inner = HiRadixCache()
"""
    )
    [finding] = lint_snippet(source, "HC001")
    append = line_of(source, "self.work_list.append")
    assert f"kept in self.work_list (line {append}) and never waited" in finding.message
    assert "record" not in finding.message
