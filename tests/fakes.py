"""Test doubles in one place (the cache model, traced groups, the kernel's siginfo).
Each says what it mimics and how it differs."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from datetime import timedelta
from types import SimpleNamespace
from typing import Any, NamedTuple

import torch

from hicache_model.work_list import PendingSend, WorkList


class FakeWork:
    """Mimics the Work a gloo `dist.isend` returns, as the policies see it.

    Like gloo (pytorch issue #30723), `is_completed()` stays False until `wait()` has been
    called, however long ago the peer received. `wait(timeout=...)` raises gloo's
    "Timed out waiting ..." RuntimeError while the fake is marked as not yet received;
    `wait()` without a timeout always succeeds (the peer receives eventually).
    `error`, when set, is raised by every wait, as a broken connection would be.
    """

    def __init__(self, received: bool = True, error: str | None = None) -> None:
        self.received = received
        self.error = error
        self.waited = False
        self.wait_calls = 0
        self.timeouts: list[timedelta | None] = []
        self.on_wait: Callable[[], None] | None = None  # runs inside wait(), before it returns

    def is_completed(self) -> bool:
        return self.waited

    def wait(self, timeout: timedelta | None = None) -> bool:
        self.wait_calls += 1
        self.timeouts.append(timeout)
        if self.on_wait is not None:
            self.on_wait()
        if self.error is not None:
            raise RuntimeError(self.error)
        if timeout is not None and not self.received:
            raise RuntimeError(
                f"Timed out waiting {timeout.total_seconds() * 1000:.0f}ms for send operation to complete"
            )
        self.waited = True
        return True


def pending_send(work: FakeWork, peer: int = 1, elements: int = 1) -> PendingSend:
    """A PendingSend as PPSync.agree appends it: the Work and the int32 count it sends."""
    data = torch.zeros(elements, dtype=torch.int32)
    return PendingSend(work=work, data=data, peer=peer, sent_at=0.0, peer_pp=peer)


def work_list_of(*works: FakeWork, peer: int = 1) -> WorkList:
    """A WorkList holding one single-int32 send per given Work, in order."""
    works_list = WorkList()
    for work in works:
        works_list.append(pending_send(work, peer))
    return works_list


class FakeEvent:
    """Mimics a copy's completion event (`torch.cuda.Event` / `CpuEvent`) whose readiness the test sets."""

    def __init__(self, ready: bool = False) -> None:
        self.ready = ready
        self.synchronized = 0

    def query(self) -> bool:
        return self.ready

    def synchronize(self) -> None:
        self.synchronized += 1
        self.ready = True


class ManualEvent:
    """The completion event of a ManualCopyStream copy: done once the stream has run it."""

    def __init__(self, stream: ManualCopyStream) -> None:
        self.done = False
        self._stream = stream

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        while not self.done:  # a stream finishes earlier copies first
            self._stream.run(1)


class ManualCopyStream:
    """Mimics a CopyStream (CUDA side stream / CpuCopyStream) that runs copies only when told.

    Copies queue up in submission order; `run(n)` runs the oldest n, and an event's
    `synchronize()` runs every copy up to and including its own, as a real stream
    would have by the time the wait returns. Nothing runs on another thread.
    """

    def __init__(self) -> None:
        self._pending: list[tuple[Callable[[], None], ManualEvent]] = []
        self.closed = False

    def submit(self, copy: Callable[[], None]) -> ManualEvent:
        event = ManualEvent(self)
        self._pending.append((copy, event))
        return event

    def run(self, n: int | None = None) -> None:
        for _ in range(len(self._pending) if n is None else n):
            copy, event = self._pending.pop(0)
            copy()
            event.done = True

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        self.closed = True


class FakePPSync:
    """Mimics PPSync on a downstream stage: `agree` returns the count PP0 sent, not the local one.

    Every element of the returned tensor is `told`, whatever this stage counted, so a test
    can tell a stage to apply more acks than it has queued.
    """

    def __init__(self, told: int) -> None:
        self.told = told
        self.work_list = WorkList()
        self.asked: list[list[int]] = []

    def agree(self, counts: torch.Tensor) -> torch.Tensor:
        self.asked.append(counts.tolist())
        return torch.full_like(counts, self.told)


class FakeIsend:
    """Mimics `torch.distributed.isend` on PP0 for a test that patches it into hicache_model.pp_sync.

    Records each call's tensor, destination rank in the group and group, and returns a
    FakeWork, so PP sync's sending side runs without a process group; `error`, when set, is
    raised instead, as gloo does once the connection to the peer is closed. Like torch, it
    takes the destination as a global rank (`dst`) or a rank in the group (`group_dst`);
    with no group the two are the same.
    """

    def __init__(self, error: str | None = None) -> None:
        self.error = error
        self.calls: list[tuple[torch.Tensor, int, object]] = []

    def __call__(
        self,
        tensor: torch.Tensor,
        dst: int | None = None,
        group: object = None,
        tag: int = 0,
        group_dst: int | None = None,
    ) -> FakeWork:
        if (dst is None) == (group_dst is None):
            raise ValueError("give exactly one of dst and group_dst")  # as torch does
        if self.error is not None:
            raise RuntimeError(self.error)
        self.calls.append((tensor, group_dst if dst is None else dst, group))
        return FakeWork()


class FakeRecv:
    """Mimics `torch.distributed.recv` on a downstream stage for a test that patches it into
    hicache_model.pp_sync: writes `value` into the tensor, as if the previous stage had sent it, and
    records the source rank in the group (`group_src`) or global (`src`) it was called with."""

    def __init__(self, value: int) -> None:
        self.value = value
        self.calls: list[dict[str, object]] = []

    def __call__(
        self,
        tensor: torch.Tensor,
        src: int | None = None,
        group: object = None,
        tag: int = 0,
        group_src: int | None = None,
    ) -> int:
        self.calls.append({"src": src, "group_src": group_src, "group": group})
        tensor.fill_(self.value)
        return 0 if src is None else src


class RecordingWorkList:
    """Mimics the two WorkList attributes FaultInjector touches: `blocked_on` and `fail_next_wait`.

    Every value assigned to `blocked_on` is kept in `blocked_history`, in order, as a sampler
    reading it from another thread would see them in turn; `on_blocked`, when set, runs on
    each assignment (in the assigning thread). Unlike WorkList it holds no sends and cannot wait.
    """

    def __init__(self) -> None:
        self.fail_next_wait = False
        self.blocked_history: list[str | None] = []
        self.on_blocked: Callable[[str | None], None] | None = None
        self._blocked_on: str | None = None

    @property
    def blocked_on(self) -> str | None:
        return self._blocked_on

    @blocked_on.setter
    def blocked_on(self, value: str | None) -> None:
        self._blocked_on = value
        self.blocked_history.append(value)
        if self.on_blocked is not None:
            self.on_blocked(value)


class FakeTracedWork:
    """Mimics a torch.distributed Work after `hicache trace` patched its class: `wait()` and
    `is_completed()` report to the tracer's table as the patches do. Unlike a real Work it
    completes only when the test sets `done` (or waits it). `tensor(n)` stands for a tensor
    of n bytes (all the tracer reads of one)."""

    def __init__(self, table: Any = None) -> None:
        self.table = table
        self.done = False

    def wait(self) -> bool:
        self.done = True
        if self.table is not None and (ref := self.table.ref_of(self)) is not None:
            self.table.waited_work(ref)
        return True

    def is_completed(self) -> bool:
        if self.done and self.table is not None:
            self.table.seen_complete(self)
        return self.done

    @staticmethod
    def tensor(nbytes: int) -> Any:
        return SimpleNamespace(nbytes=nbytes)


class FakeTracedGroup:
    """Mimics a ProcessGroup after `works.install`: `send`/`recv` count the message against
    the peer and hand out a Work, reported to `table` with their caller's frame, as the
    patched methods (tracer/messages.counting) do; no data moves."""

    table: Any = None

    def send(self, tensors: list[Any], dst: int, tag: int) -> FakeTracedWork:
        return self._work("send", dst, tensors)

    def recv(self, tensors: list[Any], src: int, tag: int) -> FakeTracedWork:
        return self._work("recv", src, tensors)

    def _work(self, name: str, peer: int, tensors: list[Any]) -> FakeTracedWork:
        messages = self.table.messages
        counts = messages.sent if name == "send" else messages.received
        count = messages.counter(counts, self, peer)
        count[0] += 1
        count[1] += sum(t.nbytes if hasattr(t, "nbytes") else 0 for t in tensors)
        work = FakeTracedWork(self.table)
        self.table.created_work(work, name, sys._getframe(2), (self, tensors, peer, lambda group, rank: rank))
        return work


class FakeSiginfo(NamedTuple):
    """Mimics the `signal.struct_siginfo` that `signal.sigtimedwait` returns. The defaults
    are a real delivery: SIGTERM sent with kill() by process 4242, uid 0. Under ptrace on
    some kernels sigtimedwait returns one nothing filled in (si_signo 0, or stack garbage):
    `BOGUS` is what gdb's attach and detach made a waiting thread see on this VM."""

    si_signo: int = signal.SIGTERM
    si_code: int = 0  # SI_USER
    si_errno: int = 0
    si_pid: int = 4242
    si_uid: int = 0
    si_status: int = 0
    si_band: int = 4242


BOGUS_SIGINFOS = (
    FakeSiginfo(0, -777262160, 0, -263088725, 235246580, -777662912, 1010376371627726251),
    FakeSiginfo(-1359559408, -777262160, 22067, -263088725, 235246580, -777662912, 1010376371627726251),
    FakeSiginfo(signal.SIGINT, -777262160, 22067, -263088725, 235246580, 0, 0),  # a stop signal's number by chance
)
