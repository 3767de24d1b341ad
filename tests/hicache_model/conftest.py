"""Shared fixtures for the cache model's tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

from hicache_model.hiradix_cache import CacheConfig, HiRadixCache
from hicache_model.memory_pool import KVShape
from hicache_model.policies import make_policy
from hicache_model.pp_sync import Groups, PPSync, Topology
from hicache_model.radix_tree import TreeNode
from hicache_model.work_list import WorkList
from tests.fakes import FakePPSync

# Four float32 elements per token: small, and exact when compared.
TINY_KV = KVShape(layers=1, heads=1, head_dim=2, dtype=torch.float32)


def single_stage_sync() -> PPSync:
    """The PP sync of a one-stage, one-TP-rank pipeline: it never sends or receives."""
    return PPSync(Topology(0, 1, 1), Groups(None, None), WorkList())


@pytest.fixture
def make_cache() -> Iterator[Callable[..., HiRadixCache]]:
    """Builds HiRadixCaches on the CPU (pp_size=1, tp_size=1) and closes their copy streams after the test."""
    built: list[HiRadixCache] = []

    def build(
        device_pool_tokens: int = 64,
        host_pool_tokens: int = 256,
        write_through_threshold: int = 2,
        policy: str = "drain",
        sync: PPSync | FakePPSync | None = None,
        kv: KVShape = TINY_KV,
    ) -> HiRadixCache:
        config = CacheConfig(device_pool_tokens, host_pool_tokens, write_through_threshold, kv)
        # A FakePPSync stands in for a PPSync: the cache only calls agree() and reads work_list.
        pp = sync or single_stage_sync()
        cache = HiRadixCache(config, torch.device("cpu"), pp, make_policy(policy))  # type: ignore[arg-type]
        built.append(cache)
        return cache

    yield build
    for cache in built:
        cache.close()


def all_nodes(cache: HiRadixCache) -> list[TreeNode]:
    """Every node of the cache's tree but the root."""
    found, stack = [], list(cache.tree.root.children.values())
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(node.children.values())
    return found
