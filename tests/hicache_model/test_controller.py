"""The cache controller: write-through and load-back really copy rows; acks are counted in order."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from hicache_model.controller import Ack, CacheController, count_ready
from hicache_model.memory_pool import DeviceKVPool, HostKVPool, KVShape
from hicache_model.streams import CpuCopyStream
from tests.fakes import FakeEvent, ManualCopyStream

SHAPE = KVShape(layers=1, heads=1, head_dim=2, dtype=torch.float32)  # 4 elements per row


def idx(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def pools() -> tuple[DeviceKVPool, HostKVPool]:
    device = DeviceKVPool(8, SHAPE, torch.device("cpu"))
    device.kv.copy_(torch.arange(32, dtype=torch.float32).reshape(8, 4))  # row i holds 4i..4i+3
    return device, HostKVPool(8, SHAPE, pin=False)


@pytest.fixture
def cpu_controller() -> Iterator[CacheController]:
    device, host = pools()
    controller = CacheController(device, host, CpuCopyStream())
    yield controller
    controller.close()


def test_write_copies_device_rows_into_host_slots(cpu_controller: CacheController) -> None:
    c = cpu_controller
    host_slots = idx(6, 1)
    c.write(idx(2, 5), host_slots, node_id=7)

    (ack,) = c.ack_write_queue
    assert ack.node_ids == [7]
    assert ack.host_slots.tolist() == [6, 1]
    assert c.ack_load_queue == []
    ack.event.synchronize()
    assert torch.equal(c.host_pool.kv[6], c.device_pool.kv[2])
    assert torch.equal(c.host_pool.kv[1], c.device_pool.kv[5])
    assert c.host_pool.kv[[0, 2, 3, 4, 5, 7]].abs().sum() == 0  # other host rows untouched


def test_load_copies_host_rows_back_into_device_slots(cpu_controller: CacheController) -> None:
    c = cpu_controller
    c.host_pool.kv[3] = torch.full((4,), 100.0)
    c.host_pool.kv[4] = torch.full((4,), 200.0)
    before = c.device_pool.kv.clone()

    c.load(idx(3, 4), idx(0, 7), load_id=11)

    (ack,) = c.ack_load_queue
    assert ack.node_ids == [11]
    ack.event.synchronize()
    assert c.device_pool.kv[0].tolist() == [100.0] * 4
    assert c.device_pool.kv[7].tolist() == [200.0] * 4
    assert torch.equal(c.device_pool.kv[1:7], before[1:7])


def test_copies_happen_on_the_stream_not_at_submit() -> None:
    device, host = pools()
    stream = ManualCopyStream()
    c = CacheController(device, host, stream)
    c.write(idx(1), idx(0), node_id=1)
    c.write(idx(2), idx(1), node_id=2)

    assert host.kv.abs().sum() == 0
    assert count_ready(c.ack_write_queue) == 0
    stream.run(1)
    assert count_ready(c.ack_write_queue) == 1
    assert torch.equal(host.kv[0], device.kv[1]) and host.kv[1].abs().sum() == 0
    stream.run()
    assert count_ready(c.ack_write_queue) == 2
    assert torch.equal(host.kv[1], device.kv[2])


def test_close_closes_the_stream() -> None:
    stream = ManualCopyStream()
    CacheController(*pools(), stream).close()
    assert stream.closed


def _queue(*ready: bool) -> list[Ack]:
    return [Ack(FakeEvent(r), [i], idx(i)) for i, r in enumerate(ready)]


@pytest.mark.parametrize(
    ("ready", "expected"),
    [
        ((), 0),
        ((True, True, True), 3),
        ((True, True, False, True), 2),  # a finished ack behind an unfinished one waits its turn
        ((False, True, True), 0),
    ],
)
def test_count_ready_counts_only_the_finished_head(ready: tuple[bool, ...], expected: int) -> None:
    queue = _queue(*ready)
    assert count_ready(queue) == expected
    assert len(queue) == len(ready)  # counting pops nothing
