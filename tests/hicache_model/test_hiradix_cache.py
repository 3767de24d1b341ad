"""HiRadixCache on one CPU stage: serving, write-through, load-back, the event round, PP desync."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from hicache_model.hiradix_cache import HiRadixCache, PPDesyncError
from hicache_model.memory_pool import HostSlotState
from hicache_model.policies import POLICIES
from hicache_model.radix_tree import TreeNode
from tests.fakes import FakePPSync, ManualCopyStream
from tests.hicache_model.conftest import all_nodes

MakeCache = Callable[..., HiRadixCache]
A = tuple(range(1, 9))  # 8 tokens
B = tuple(range(100, 108))


def serve_and_release(cache: HiRadixCache, tokens: tuple[int, ...], fill: float = 1.0) -> TreeNode:
    node = cache.serve(tokens, fill_value=fill)
    assert node is not None
    cache.release(node)
    return node


def host_states(cache: HiRadixCache, slots: torch.Tensor) -> set[HostSlotState]:
    return {HostSlotState(int(s)) for s in cache.host_pool.state[slots]}


def manual_stream(cache: HiRadixCache) -> ManualCopyStream:
    """Swap the cache's copy stream for one whose copies finish only when the test says so."""
    cache.controller.close()
    stream = ManualCopyStream()
    cache.controller.stream = stream
    return stream


def test_serve_fills_new_slots_and_locks_the_request_until_release(make_cache: MakeCache) -> None:
    cache = make_cache()
    node = cache.serve(A, fill_value=3.0)
    assert node is not None and node.key == A
    assert node.lock_ref == 1
    assert cache.device_pool.kv[node.device_value].eq(3.0).all()
    assert cache.device_pool.free_slots == 64 - 8
    assert (cache.counters.requests, cache.counters.miss_tokens) == (1, 8)
    cache.release(node)
    assert node.lock_ref == 0


def test_a_repeated_request_is_a_device_hit(make_cache: MakeCache) -> None:
    cache = make_cache()
    serve_and_release(cache, A)
    serve_and_release(cache, A[:4] + (50, 51))
    c = cache.counters
    assert (c.device_hit_tokens, c.miss_tokens) == (4, 8 + 2)
    assert cache.device_pool.free_slots + cache.tree.device_tokens == 64


def test_a_request_that_cannot_fit_is_rejected_and_leaves_no_lock(make_cache: MakeCache) -> None:
    cache = make_cache(device_pool_tokens=8)
    held = cache.serve(A)
    assert cache.serve(B) is None
    assert cache.counters.rejected == 1
    assert held is not None and held.lock_ref == 1
    cache.release(held)
    assert all(n.lock_ref == 0 for n in all_nodes(cache))
    assert cache.device_pool.free_slots + cache.tree.device_tokens == 8


def test_hot_node_is_written_through_and_acked(make_cache: MakeCache) -> None:
    cache = make_cache(write_through_threshold=2)
    node = serve_and_release(cache, A, fill=3.0)
    serve_and_release(cache, A)
    assert cache.counters.write_throughs == 0
    serve_and_release(cache, A)  # second hit: hot
    assert cache.counters.write_throughs == 1
    assert node.backuped and node.lock_ref == 1  # pinned until the write is acknowledged

    cache.settle_events()

    assert cache.counters.writes_acked == 1
    assert node.lock_ref == 0
    assert host_states(cache, node.host_value) == {HostSlotState.BACKUP}
    assert cache.host_pool.kv[node.host_value].eq(3.0).all()
    assert cache.host_pool.free_slots + cache.tree.host_tokens == 256


def test_evicted_backup_is_loaded_back_with_its_data(make_cache: MakeCache) -> None:
    cache = make_cache(device_pool_tokens=8, host_pool_tokens=16)
    node = serve_and_release(cache, A, fill=3.0)
    serve_and_release(cache, A)
    serve_and_release(cache, A)
    cache.settle_events()
    assert node.backuped

    serve_and_release(cache, B, fill=5.0)  # needs the whole device pool: A leaves the device
    assert node.evicted and node.backuped
    assert cache.counters.device_evicted_tokens == 8

    again = cache.serve(A, fill_value=9.0)
    assert again is node
    assert cache.counters.host_hit_tokens == 8 and cache.counters.load_backs == 1
    assert B[0] not in cache.tree.root.children  # B was not backed up: deleted to make room
    cache.settle_events()
    cache.release(node)

    assert cache.counters.loads_acked == 1
    assert cache.device_pool.kv[node.device_value].eq(3.0).all()  # the host copy, not B's 5.0 or 9.0
    assert all(n.lock_ref == 0 for n in all_nodes(cache))


def test_event_round_applies_only_finished_copies(make_cache: MakeCache) -> None:
    cache = make_cache()
    stream = manual_stream(cache)
    node = serve_and_release(cache, A, fill=3.0)
    serve_and_release(cache, A)
    serve_and_release(cache, A)
    assert stream.in_flight == 1

    cache.check_hicache_events()
    assert cache.counters.writes_acked == 0
    assert node.lock_ref == 1
    assert host_states(cache, node.host_value) == {HostSlotState.RESERVED}

    stream.run()
    cache.check_hicache_events()
    assert cache.counters.writes_acked == 1
    assert node.lock_ref == 0
    assert host_states(cache, node.host_value) == {HostSlotState.BACKUP}


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_single_stage_round_sends_nothing_under_every_policy(make_cache: MakeCache, policy: str) -> None:
    cache = make_cache(policy=policy)
    for i in range(6):
        serve_and_release(cache, A[:4] + (i,))
        cache.check_hicache_events()
    assert len(cache.work_list) == 0 and cache.work_list.held_bytes == 0
    assert (cache.sync.sent, cache.sync.received) == (0, 0)


@pytest.mark.parametrize(("policy", "messages"), [("drain", [[0], [0]]), ("batched", [[0, 0]])])
def test_batched_policy_agrees_on_both_counts_in_one_message(
    make_cache: MakeCache, policy: str, messages: list[list[int]]
) -> None:
    sync = FakePPSync(told=0)
    cache = make_cache(policy=policy, sync=sync)
    cache.check_hicache_events()
    assert sync.asked == messages


def test_batched_round_applies_writes_and_loads(make_cache: MakeCache) -> None:
    cache = make_cache(device_pool_tokens=8, host_pool_tokens=16, policy="batched")
    for _ in range(3):
        serve_and_release(cache, A)
    for ack in cache.controller.ack_write_queue:
        ack.event.synchronize()
    cache.check_hicache_events()
    assert cache.counters.writes_acked == 1
    serve_and_release(cache, B)
    serve_and_release(cache, A)  # a load-back
    for ack in cache.controller.ack_load_queue:
        ack.event.synchronize()
    cache.check_hicache_events()
    assert cache.counters.loads_acked == 1
    assert cache.controller.ack_write_queue == [] and cache.controller.ack_load_queue == []


def test_applying_more_acks_than_queued_is_a_desync(make_cache: MakeCache) -> None:
    cache = make_cache()
    with pytest.raises(PPDesyncError, match="told to apply 1 write acks, only 0 queued"):
        cache._apply_writes(1)
    with pytest.raises(PPDesyncError, match="load acks"):
        cache._apply_loads(2)


@pytest.mark.parametrize("policy", ["drain", "batched"])
def test_a_downstream_count_larger_than_the_local_queue_raises(make_cache: MakeCache, policy: str) -> None:
    cache = make_cache(policy=policy, sync=FakePPSync(told=3))
    for _ in range(3):
        serve_and_release(cache, A)  # one write queued locally
    queued = list(cache.controller.ack_write_queue)
    assert len(queued) == 1

    with pytest.raises(PPDesyncError, match="told to apply 3 write acks, only 1 queued"):
        cache.check_hicache_events()
    assert cache.controller.ack_write_queue == queued  # nothing popped on a desync


def test_settle_events_waits_for_and_applies_every_ack(make_cache: MakeCache) -> None:
    cache = make_cache()
    stream = manual_stream(cache)
    for _ in range(3):
        serve_and_release(cache, A)
    assert stream.in_flight == 1
    cache.settle_events()
    assert stream.in_flight == 0
    assert cache.controller.ack_write_queue == []
    assert cache.counters.writes_acked == 1


@pytest.mark.parametrize("policy", ["reap", "batched"])
def test_every_kept_send_holds_its_own_payload(
    make_cache: MakeCache, monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    # The count tensors are reused from round to round; what is sent must not be them, or a
    # Work kept by `reap` would see its payload overwritten by the next round's count.
    from hicache_model import pp_sync
    from hicache_model.pp_sync import Groups, PPSync, Topology
    from hicache_model.work_list import WorkList
    from tests.fakes import FakeIsend

    isend = FakeIsend()
    monkeypatch.setattr(pp_sync.dist, "isend", isend)
    cache = make_cache(policy=policy, sync=PPSync(Topology(0, 2, 1), Groups(None, None), WorkList()))
    for _ in range(3):
        cache.check_hicache_events()

    payloads = [sent for sent, _, _ in isend.calls]
    assert len(payloads) == (3 if policy == "batched" else 6)
    assert len({p.data_ptr() for p in payloads}) == len(payloads)
    if policy == "reap":
        kept = [s.data for s in cache.work_list]
        assert len(kept) == 6 and all(k is p for k, p in zip(kept, payloads, strict=True))  # each its own buffer
