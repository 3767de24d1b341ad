"""The scheduler loop over a seeded workload on one CPU stage: pool invariants, locks, counters."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hicache_model.hiradix_cache import HiRadixCache
from hicache_model.memory_pool import HostSlotState, KVShape
from hicache_model.policies import POLICIES
from hicache_model.scheduler import Scheduler
from hicache_model.workload import PRESETS, Workload
from tests.fakes import FakePPSync
from tests.hicache_model.conftest import all_nodes

MakeCache = Callable[..., HiRadixCache]
DEVICE_TOKENS, HOST_TOKENS = 512, 2048  # a device pool smaller than the shared prefixes: load-backs happen


def assert_pools_match_tree(cache: HiRadixCache) -> None:
    assert cache.device_pool.free_slots + cache.tree.device_tokens == cache.device_pool.size
    assert cache.host_pool.free_slots + cache.tree.host_tokens == cache.host_pool.size


def retire_everything(scheduler: Scheduler, seed: int) -> None:
    """Stop arrivals, let every running request finish decoding, then settle all copies."""
    scheduler.workload = Workload(PRESETS["idle"], seed)
    for _ in range(PRESETS["busy"].decode_rounds + 1):
        scheduler.run_round()
    scheduler.cache.settle_events()


def test_busy_workload_keeps_pools_and_tree_consistent(make_cache: MakeCache) -> None:
    cache = make_cache(DEVICE_TOKENS, HOST_TOKENS, kv=KVShape())
    scheduler = Scheduler(cache, Workload(PRESETS["busy"], seed=7))

    for _ in range(3000):
        scheduler.run_round()
        assert_pools_match_tree(cache)
    retire_everything(scheduler, seed=7)

    assert_pools_match_tree(cache)
    assert cache.tree.root.lock_ref == 1
    assert [n.key[:3] for n in all_nodes(cache) if n.lock_ref != 0] == []
    assert cache.ongoing_write_through == {} and cache.ongoing_load_back == {}
    host_state = cache.host_pool.state
    assert int((host_state == int(HostSlotState.RESERVED)).sum()) == 0
    assert int((host_state == int(HostSlotState.BACKUP)).sum()) == cache.tree.host_tokens

    c = cache.counters
    assert c.requests > 1000
    assert c.write_throughs > 0 and c.writes_acked == c.write_throughs
    assert c.load_backs > 0 and c.loads_acked == c.load_backs
    assert c.host_hit_tokens > 0 and c.device_evicted_tokens > 0
    assert len(cache.work_list) == 0 and cache.sync.sent == 0


@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_policy_runs_the_loop_on_one_stage(make_cache: MakeCache, policy: str) -> None:
    cache = make_cache(128, 256, policy=policy)
    scheduler = Scheduler(cache, Workload(PRESETS["busy"], seed=1))
    for _ in range(300):
        scheduler.run_round()
        assert_pools_match_tree(cache)
    retire_everything(scheduler, seed=1)
    assert all(n.lock_ref == 0 for n in all_nodes(cache))
    assert scheduler.round == 300 + PRESETS["busy"].decode_rounds + 1
    assert len(cache.work_list) == 0


def test_warm_up_leaves_no_copy_unacknowledged(make_cache: MakeCache) -> None:
    cache = make_cache(128, 256)
    scheduler = Scheduler(cache, Workload(PRESETS["busy"], seed=3))
    scheduler.warm_up(500)
    assert scheduler.round == 500
    assert cache.controller.ack_write_queue == [] and cache.controller.ack_load_queue == []
    assert cache.ongoing_write_through == {} and cache.ongoing_load_back == {}
    assert cache.counters.write_throughs > 0 and cache.counters.load_backs > 0


def test_warm_up_brings_every_rank_to_the_same_state(make_cache: MakeCache) -> None:
    """Two ranks with the same seed end warm-up identical, whatever their copy threads' timing."""
    ranks = [Scheduler(make_cache(128, 256), Workload(PRESETS["busy"], seed=11)) for _ in range(2)]
    for scheduler in ranks:
        scheduler.warm_up(500)
    first, second = (s.cache for s in ranks)
    assert first.counters == second.counters
    assert (first.tree.device_tokens, first.tree.host_tokens) == (second.tree.device_tokens, second.tree.host_tokens)


def test_an_idle_server_still_syncs_every_round(make_cache: MakeCache) -> None:
    """The incident's precondition: with nothing to do, each round still exchanges both counts."""
    sync = FakePPSync(told=0)
    cache = make_cache(policy="reap", sync=sync)
    scheduler = Scheduler(cache, Workload(PRESETS["idle"], seed=0))
    for _ in range(100):
        scheduler.run_round()
    assert scheduler.round == 100
    assert cache.counters.requests == 0
    assert sync.asked == [[0]] * 200  # writing_check and loading_check, every round
