"""Containers are objects (issue 39): the same list, dict or tuple reached through a parameter, a
getter's return, a constructor's field, a tuple's element or a dict's value holds the same Works.
One-module forms of each, found and clean; the multi-module programs are test_container_programs.py."""

from __future__ import annotations

import pytest

from tests.lint.conftest import line_of, lint_snippet, rule_lines

FOUND = {
    "a dict passed to a helper": """
        import torch.distributed as dist
        def start_send(t, dst, step, pending):
            pending[step] = dist.isend(t, dst)  # HERE
        class Stage:
            def __init__(self):
                self.by_step = {}
            def step(self, n, t):
                start_send(t, 1, n, self.by_step)
            def reap(self):
                for n in [n for n, w in self.by_step.items() if w.is_completed()]:
                    del self.by_step[n]
        """,
    "a list passed to a method of the same object": """
        import torch.distributed as dist
        class Stage:
            def __init__(self):
                self.pending = []
            def _start(self, t, pending):
                pending.append(dist.isend(t, 1))  # HERE
            def step(self, t):
                self._start(t, self.pending)
                self.pending = [w for w in self.pending if not w.is_completed()]
        """,
    "the incident in a function's while loop, reaped by a slice of itself": """
        import torch
        import torch.distributed as dist
        def main():
            work_list = []
            c = 0
            while True:
                work_list.append(dist.isend(torch.ones(1), 1))  # HERE
                while c < len(work_list) and work_list[c].is_completed():
                    c += 1
                work_list = work_list[c:]
                c = 0
        """,
    "pairs whose tensor a public function returns": """
        import torch.distributed as dist
        class Stream:
            def __init__(self):
                self.pairs = []
            def push(self, t):
                self.pairs.append((t, dist.isend(t, 1)))  # HERE
            def reclaim(self):
                t, work = self.pairs[0]
                if work.is_completed():
                    self.pairs.pop(0)
                    return t
        """,
    "a collective chosen into a variable": """
        import torch.distributed as dist
        class Gather:
            def __init__(self):
                self.handles = []
            def start(self, out, inp, fused):
                func = dist.all_gather_into_tensor if fused else dist._all_gather_base
                self.handles.append(func(out, inp, async_op=True))  # HERE
        """,
    "a ProcessGroup from new_group": """
        import torch.distributed as dist
        class Syncer:
            def __init__(self):
                self.group = dist.new_group(backend="gloo")
                self.works = []
            def sync(self, t):
                self.works.append(self.group.send([t], 1, 0))  # HERE
        """,
    "a ProcessGroup subclass of the program": """
        import torch.distributed as dist
        class Wrapped(dist.ProcessGroup):
            def label(self):
                return "wrapped"
        class Syncer:
            def __init__(self, pg):
                self.pg = Wrapped(pg)
                self.works = []
            def sync(self, t):
                self.works.append(self.pg.allreduce([t]))  # HERE
        """,
    "a dict literal's values by constant key": """
        import torch.distributed as dist
        class Ring:
            def __init__(self):
                self.state = {"work": None, "out": None}
            def start(self, t, out):
                self.state["work"] = dist.isend(t, 1)  # HERE
                self.state["out"] = out
            def result(self):
                return self.state["out"]
        """,
}

CLEAN = {
    "a dict passed to a helper, waited": FOUND["a dict passed to a helper"].replace(
        "if w.is_completed()]", "if w.wait() is None]"
    ),
    "a list passed to a method, drained": FOUND["a list passed to a method of the same object"].replace(
        "self.pending = [w for w in self.pending if not w.is_completed()]",
        "for w in self.pending:\n                    w.wait()\n                self.pending = []",
    ),
    "pairs waited before the tensor is reused": FOUND["pairs whose tensor a public function returns"].replace(
        "if work.is_completed():", "if work.wait() is None:"
    ),
    "a dict's work waited by its key": FOUND["a dict literal's values by constant key"].replace(
        'return self.state["out"]', 'self.state["work"].wait()\n                return self.state["out"]'
    ),
    "a ProcessGroup's send waited": FOUND["a ProcessGroup from new_group"].replace(
        "self.works.append(self.group.send([t], 1, 0))  # HERE", "self.group.send([t], 1, 0).wait()"
    ),
    "a socket's send is no Work": """
        import socket
        class Client:
            def __init__(self):
                self.sock = socket.socket()
                self.sent = []
            def push(self, data):
                self.sent.append(self.sock.send(data))
        """,
}


@pytest.mark.parametrize("source", FOUND.values(), ids=FOUND.keys())
def test_found_at_the_work_s_line(source: str) -> None:
    assert rule_lines(source, "HC001") == [("HC001", line_of(source, "# HERE"))]


@pytest.mark.parametrize("source", CLEAN.values(), ids=CLEAN.keys())
def test_clean(source: str) -> None:
    assert lint_snippet(source, "HC001", "HC003", "HC004", "HC005") == []


def test_a_tuple_element_goes_only_where_it_is_unpacked() -> None:
    """The tensor of a (tensor, Work) pair handed to code outside the program does not take the
    Work with it; unpacked the other way round, the Work is handed on and nothing is found."""
    source = FOUND["pairs whose tensor a public function returns"]
    assert len(lint_snippet(source, "HC001")) == 1
    assert lint_snippet(source.replace("return t", "return work"), "HC001") == []


def test_a_dict_key_ending_tells_values_apart() -> None:
    """`handle[kind + "_work"]` and `handle[kind + "_out"]` are different values; `handle[kind]` may be either."""
    source = """
        import torch.distributed as dist
        class Attn:
            def __init__(self):
                self.handle = {}
            def start(self, kind, t, out):
                self.handle[kind + "_work"] = dist.all_reduce(t, async_op=True)
                self.handle[kind + "_out"] = out
            def out(self, kind):
                return self.handle[kind + "_out"]
        """
    assert rule_lines(source, "HC001") == [("HC001", line_of(source, "dist.all_reduce("))]
    assert lint_snippet(source.replace('kind + "_out"]\n', "kind]\n"), "HC001") == []


def test_a_collective_polled_is_not_said_to_stay_incomplete() -> None:
    """On gloo a collective's Work completes without wait() (measured): the message says what
    polling misses instead - an error it raises is never seen."""
    source = """
        import torch.distributed as dist
        class C:
            def __init__(self):
                self.works = []
            def step(self, t):
                self.works.append(dist.all_reduce(t, async_op=True))
                self.works = [w for w in self.works if not w.is_completed()]
        """
    [finding] = lint_snippet(source, "HC001")
    assert "no error it raises is ever seen" in finding.message and "stays False" not in finding.message


def test_a_process_group_recv_dropped_is_hc004() -> None:
    source = """
        import torch
        from torch.distributed import ProcessGroup
        def pull(pg: ProcessGroup, buf: torch.Tensor) -> torch.Tensor:
            pg.recv([buf], 0, 0)
            return buf
        """
    assert rule_lines(source, "HC004") == [("HC004", line_of(source, "pg.recv("))]


WRAPPED = """
    from torch.distributed import ProcessGroup
    class Quantized:
        def __init__(self, work):
            self.work = work
        def wait(self):
            self.work.wait()
    class Managed:
        def __init__(self, work):
            self._work = work
        def wait(self):
            self._work.wait()
    def allreduce(pg: ProcessGroup, t, quantize):
        work = Quantized(pg.allgather([t], [t])) if quantize else pg.allreduce([t])
        return Managed(work)
    class Trainer:
        def __init__(self):
            self.works = []
        def step(self, pg, t):
            self.works.append(allreduce(pg, t, False))
        def sync(self):
            for w in self.works:
                w.wait()
            self.works = []
    """


def test_a_wrapper_s_wait_waits_a_work_or_another_wrapper() -> None:
    """`self._work.wait()` where _work is a ProcessGroup's Work or a wrapper with its own wait()
    (torchft's _ManagedWork): both are waited. A wrapper that only polls its Work keeps it."""
    assert lint_snippet(WRAPPED, "HC001") == []
    polled = WRAPPED.replace(
        "        def wait(self):\n            self._work.wait()",
        "        def done(self):\n            return self._work.is_completed()",
    )
    assert rule_lines(polled, "HC001") == [("HC001", line_of(polled, "else pg.allreduce("))]


RECV_HELPER = """
    import torch.distributed as dist
    class Comm:
        def _recv(self, t, src, async_op=False):
            return dist.irecv(t, src) if async_op else dist.recv(t, src)
        def pull(self, t):
            self._recv(t, 0)
            return t
    """


def test_a_receive_nothing_waits_is_dropped_unless_its_switch_is_never_on() -> None:
    """HC004 also finds a receive that is bound and used but never waited, kept or handed on;
    behind `if async_op` (a parameter defaulting to False) it exists only if True reaches it."""
    assert lint_snippet(RECV_HELPER, "HC004") == []
    on = RECV_HELPER.replace("self._recv(t, 0)", "self._recv(t, 0, async_op=True)")
    assert rule_lines(on, "HC004") == [("HC004", line_of(on, "dist.irecv("))]
    [finding] = lint_snippet(on, "HC004")
    assert "never waited, kept or handed on" in finding.message


def test_each_loop_s_variable_is_its_own() -> None:
    """`for req in self._reqs: req.wait()` does not wait what another loop's `req` goes through
    (Hetu-Galvatron's RingComm.wait, with one of its two waits deleted)."""
    source = """
        import torch.distributed as dist
        class Ring:
            def __init__(self):
                self._reqs = []
                self._recv_reqs = []
            def post(self, t, peer, batch):
                if batch:
                    self._reqs = dist.batch_isend_irecv([dist.P2POp(dist.irecv, t, peer)])
                else:
                    self._recv_reqs.append(dist.irecv(t, peer))
            def wait(self, batch):
                if batch:
                    for req in self._reqs:
                        req.wait()
                else:
                    for req in self._recv_reqs:
                        req.is_completed()
        """
    assert rule_lines(source, "HC001") == [("HC001", line_of(source, "self._recv_reqs.append(dist.irecv("))]


def test_works_returned_only_behind_a_switch_are_not_every_call_s() -> None:
    """Megatron's `if overlap_p2p_comm: return tensor, wait_handles` / `return tensor`: a call
    that leaves the switch off gets a tensor, and keeping it keeps no Work."""
    source = """
        import torch.distributed as dist
        class Comm:
            def exchange(self, t, peer, overlap=False):
                handles = [dist.isend(t, peer)]
                if overlap:
                    return t, handles
                for h in handles:
                    h.wait()
                return t
        class Schedule:
            def __init__(self, comm: Comm):
                self.comm = comm
                self.grads = []
            def step(self, t):
                self.grads.append(self.comm.exchange(t, 1))
        """
    assert lint_snippet(source, "HC001") == []
