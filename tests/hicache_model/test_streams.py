"""The CPU copy stream and its completion events: order, in-flight state, waiting, failures."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import torch

from hicache_model.streams import CpuCopyStream, make_copy_stream


@pytest.fixture
def stream() -> Iterator[CpuCopyStream]:
    s = CpuCopyStream()
    yield s
    s.close()


def test_copies_run_in_submission_order(stream: CpuCopyStream) -> None:
    gate = threading.Event()
    seen: list[int] = []

    def first() -> None:
        gate.wait()
        seen.append(0)

    events = [stream.submit(first)]
    for i in range(1, 6):
        events.append(stream.submit(lambda i=i: seen.append(i)))
    gate.set()
    events[-1].synchronize()

    assert seen == [0, 1, 2, 3, 4, 5]
    assert all(e.query() for e in events)


def test_query_is_false_while_a_copy_is_in_flight_and_true_after(stream: CpuCopyStream) -> None:
    gate = threading.Event()
    blocked = stream.submit(gate.wait)
    queued = stream.submit(lambda: None)

    assert blocked.query() is False
    assert queued.query() is False  # a stream cannot finish a later copy first

    gate.set()
    queued.synchronize()
    assert blocked.query() is True
    assert queued.query() is True


def test_synchronize_waits_for_the_copy(stream: CpuCopyStream) -> None:
    gate = threading.Event()
    finished: list[bool] = []

    def slow_copy() -> None:
        gate.wait()
        finished.append(True)

    event = stream.submit(slow_copy)
    opener = threading.Timer(0.05, gate.set)  # lets the copy finish only after synchronize() started
    opener.start()
    event.synchronize()
    assert finished == [True]
    assert event.query() is True
    opener.join()


def test_synchronize_reraises_a_failed_copy_as_runtime_error(stream: CpuCopyStream) -> None:
    def broken() -> None:
        raise ValueError("index out of range")

    failed = stream.submit(broken)
    later = stream.submit(lambda: None)

    with pytest.raises(RuntimeError, match="asynchronous copy failed") as info:
        failed.synchronize()
    assert isinstance(info.value.__cause__, ValueError)
    assert failed.query() is True  # a failed copy is finished, not in flight
    later.synchronize()  # the stream keeps running after a failed copy
    assert later.query() is True


def test_close_runs_the_copies_already_submitted() -> None:
    stream = CpuCopyStream()
    seen: list[int] = []
    for i in range(3):
        stream.submit(lambda i=i: seen.append(i))
    stream.close()
    assert seen == [0, 1, 2]


def test_a_real_tensor_copy_lands_in_the_destination(stream: CpuCopyStream) -> None:
    src = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    dst = torch.zeros(3, 2)
    stream.submit(lambda: dst.index_copy_(0, torch.tensor([2, 0]), src[:2])).synchronize()
    assert dst.tolist() == [[2.0, 3.0], [0.0, 0.0], [0.0, 1.0]]


def test_cpu_device_gets_the_cpu_stream() -> None:
    stream = make_copy_stream(torch.device("cpu"))
    try:
        assert isinstance(stream, CpuCopyStream)
    finally:
        stream.close()
