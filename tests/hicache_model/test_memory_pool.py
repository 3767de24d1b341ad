"""Device and host KV pools: slot allocation, exhaustion, the host slot state machine, sizes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from hicache_model.memory_pool import (
    DeviceKVPool,
    HostKVPool,
    HostSlotState,
    InvalidSlotTransition,
    KVShape,
    PoolExhausted,
)

SMALL = KVShape(layers=1, heads=2, head_dim=4, dtype=torch.float32)
CPU = torch.device("cpu")


def states(pool: HostKVPool, slots: torch.Tensor) -> list[HostSlotState]:
    return [HostSlotState(int(s)) for s in pool.state[slots]]


# -- KVShape --------------------------------------------------------------------
def test_bytes_per_token_counts_k_and_v_of_every_layer() -> None:
    assert KVShape().bytes_per_token == 2 * 2 * 4 * 16 * 2  # K+V, layers, heads, head_dim, fp16
    assert SMALL.row_elements == 2 * 1 * 2 * 4
    assert SMALL.bytes_per_token == 16 * 4
    assert KVShape(layers=3, heads=1, head_dim=8, dtype=torch.bfloat16).bytes_per_token == 2 * 3 * 8 * 2


def test_pool_tensor_has_one_row_per_slot() -> None:
    pool = DeviceKVPool(8, SMALL, CPU)
    assert pool.kv.shape == (8, SMALL.row_elements)
    assert pool.kv.dtype == torch.float32
    assert pool.kv.nbytes == 8 * SMALL.bytes_per_token


# -- allocation -----------------------------------------------------------------
@pytest.mark.parametrize("make", [lambda: DeviceKVPool(8, SMALL, CPU), lambda: HostKVPool(8, SMALL, pin=False)])
def test_alloc_takes_distinct_free_slots(make: Callable[[], DeviceKVPool | HostKVPool]) -> None:
    pool = make()
    first, second = pool.alloc(3), pool.alloc(5)
    assert pool.free_slots == 0
    taken = first.tolist() + second.tolist()
    assert sorted(taken) == list(range(8))
    assert first.dtype == torch.int64


def test_device_free_returns_slots_for_reuse() -> None:
    pool = DeviceKVPool(4, SMALL, CPU)
    taken = pool.alloc(4)
    pool.free(taken[:2])
    assert pool.free_slots == 2
    assert sorted(pool.alloc(2).tolist()) == sorted(taken[:2].tolist())


def test_alloc_beyond_free_raises_pool_exhausted_and_takes_nothing() -> None:
    pool = DeviceKVPool(4, SMALL, CPU)
    pool.alloc(3)
    with pytest.raises(PoolExhausted, match="asked for 2 slots, 1 free of 4"):
        pool.alloc(2)
    assert pool.free_slots == 1
    assert issubclass(PoolExhausted, RuntimeError)


def test_alloc_of_zero_slots_is_empty() -> None:
    pool = DeviceKVPool(4, SMALL, CPU)
    assert pool.alloc(0).numel() == 0
    assert pool.free_slots == 4


def test_free_of_no_slots_changes_nothing() -> None:
    pool = DeviceKVPool(4, SMALL, CPU)
    pool.free(torch.empty(0, dtype=torch.int64))
    assert pool.free_slots == 4


def test_alloc_of_a_negative_count_is_refused() -> None:
    pool = DeviceKVPool(4, SMALL, CPU)
    with pytest.raises(ValueError):
        pool.alloc(-1)
    assert pool.free_slots == 4


def test_a_pool_needs_at_least_one_slot() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        DeviceKVPool(0, SMALL, CPU)
    with pytest.raises(ValueError, match="at least one slot"):
        HostKVPool(0, SMALL, pin=False)


# -- host slot state machine ----------------------------------------------------
def test_host_slots_go_free_reserved_backup_free() -> None:
    pool = HostKVPool(4, SMALL, pin=False)
    assert states(pool, torch.arange(4)) == [HostSlotState.FREE] * 4

    taken = pool.alloc(2)
    assert states(pool, taken) == [HostSlotState.RESERVED] * 2
    pool.complete_backup(taken)
    assert states(pool, taken) == [HostSlotState.BACKUP] * 2
    pool.free(taken)
    assert states(pool, taken) == [HostSlotState.FREE] * 2
    assert pool.free_slots == 4


def _free_slot(pool: HostKVPool) -> torch.Tensor:
    return torch.tensor([int((pool.state == int(HostSlotState.FREE)).nonzero()[0])])


def _reserved_slot(pool: HostKVPool) -> torch.Tensor:
    return pool.alloc(1)


def _backup_slot(pool: HostKVPool) -> torch.Tensor:
    slot = pool.alloc(1)
    pool.complete_backup(slot)
    return slot


@pytest.mark.parametrize(
    ("make_slot", "action", "current"),
    [
        (_free_slot, "complete_backup", HostSlotState.FREE),  # FREE -> BACKUP
        (_free_slot, "free", HostSlotState.FREE),  # FREE -> FREE (double free)
        (_reserved_slot, "free", HostSlotState.RESERVED),  # RESERVED -> FREE (copy still running)
        (_backup_slot, "complete_backup", HostSlotState.BACKUP),  # BACKUP -> BACKUP
    ],
)
def test_host_pool_refuses_other_transitions_and_changes_nothing(
    make_slot: Callable[[HostKVPool], torch.Tensor], action: str, current: HostSlotState
) -> None:
    pool = HostKVPool(4, SMALL, pin=False)
    slot = make_slot(pool)
    free_before = pool.free_slots

    with pytest.raises(InvalidSlotTransition, match=f"state {current.name}"):
        getattr(pool, action)(slot)

    assert states(pool, slot) == [current]
    assert pool.free_slots == free_before


def test_host_pool_refuses_a_batch_with_one_slot_in_the_wrong_state() -> None:
    pool = HostKVPool(4, SMALL, pin=False)
    done, running = _backup_slot(pool), _reserved_slot(pool)
    batch = torch.cat((done, running))
    with pytest.raises(InvalidSlotTransition, match="state RESERVED"):
        pool.free(batch)
    assert states(pool, batch) == [HostSlotState.BACKUP, HostSlotState.RESERVED]
    assert pool.free_slots == 2


def test_host_alloc_when_exhausted_raises_pool_exhausted() -> None:
    pool = HostKVPool(2, SMALL, pin=False)
    pool.alloc(2)
    with pytest.raises(PoolExhausted):
        pool.alloc(1)
