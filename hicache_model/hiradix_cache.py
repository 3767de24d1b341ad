"""HiRadixCache: the radix tree over a device pool backed by a host pool, and its event round.

`serve` is what a scheduler does with one request: match the prefix, load host hits back,
allocate and fill device slots, insert, write hot nodes through to the host.
`check_hicache_events` is the per-round event processing whose PP sync leaked: the
policy's round-start hook, `writing_check`, `loading_check`, the round-end hook.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass

import torch

from hicache_model.controller import Ack, CacheController, count_ready
from hicache_model.memory_pool import DeviceKVPool, HostKVPool, KVShape, PoolExhausted
from hicache_model.policies import DrainPolicy
from hicache_model.pp_sync import PPSync
from hicache_model.radix_tree import RadixTree, TreeNode
from hicache_model.streams import make_copy_stream


@dataclass(frozen=True)
class CacheConfig:
    device_pool_tokens: int = 4096
    host_pool_tokens: int = 16384
    write_through_threshold: int = 2  # hits before a node is backed up to the host
    kv: KVShape = KVShape()


@dataclass
class CacheCounters:
    requests: int = 0
    rejected: int = 0  # requests that did not fit even after eviction
    device_hit_tokens: int = 0
    host_hit_tokens: int = 0
    miss_tokens: int = 0
    write_throughs: int = 0
    load_backs: int = 0
    writes_acked: int = 0
    loads_acked: int = 0
    device_evicted_tokens: int = 0
    host_evicted_tokens: int = 0


DIGEST_EVERY = 1024
_DIGEST_MOD = (1 << 61) - 1


class PPDesyncError(RuntimeError):
    """A stage was told to apply more acks than it has: the pipeline diverged."""


class HiRadixCache:
    def __init__(self, config: CacheConfig, device: torch.device, sync: PPSync, policy: DrainPolicy) -> None:
        self.config = config
        self.tree = RadixTree()
        self.device_pool = DeviceKVPool(config.device_pool_tokens, config.kv, device)
        self.host_pool = HostKVPool(config.host_pool_tokens, config.kv, pin=device.type == "cuda")
        self.controller = CacheController(self.device_pool, self.host_pool, make_copy_stream(device))
        self.sync = sync
        self.work_list = sync.work_list
        self.policy = policy
        self.counters = CacheCounters()
        self.ongoing_write_through: dict[int, TreeNode] = {}
        self.ongoing_load_back: dict[int, TreeNode] = {}  # load id -> node locked for it
        self._load_ids = itertools.count()
        self.event_rounds = 0  # check_hicache_events calls so far
        self.digest = 0
        # (event round, digest) every DIGEST_EVERY rounds, until a reader takes them: bounded,
        # because a list of every checkpoint would itself grow with rounds, like a leak.
        self.checkpoints: deque[tuple[int, int]] = deque(maxlen=1024)
        # The count tensors, allocated once and written through a numpy view (a store, not a
        # torch call): SGLang allocates a fresh one per check (`torch.tensor(finish_count)`),
        # ~3 us a message that has nothing to do with PP sync. What is sent is still a clone.
        self._count = torch.zeros(1, dtype=torch.int32)
        self._counts = torch.zeros(2, dtype=torch.int32)
        self._count_view = self._count.numpy()
        self._counts_view = self._counts.numpy()

    # -- serving a request ------------------------------------------------
    def serve(self, tokens: tuple[int, ...], fill_value: float = 1.0) -> TreeNode | None:
        """Cache one request's tokens; returns its node, locked, or None if it did not fit."""
        c = self.counters
        c.requests += 1
        match = self.tree.match_prefix(tokens)
        self.tree.inc_lock_ref(match.last_host_node)  # protect the prefix while allocating
        try:
            if match.host_hit_length:
                self._load_back(match.last_device_node, match.last_host_node)
            cached = len(match.device_indices) + match.host_hit_length
            new_slots = self._alloc_device(len(tokens) - cached)
        except PoolExhausted:
            self.tree.dec_lock_ref(match.last_host_node)
            c.rejected += 1
            return None
        c.device_hit_tokens += len(match.device_indices)
        c.host_hit_tokens += match.host_hit_length
        c.miss_tokens += len(new_slots)
        self.device_pool.kv.index_fill_(0, new_slots.to(self.device_pool.kv.device), fill_value)
        prefix = torch.cat([n.device_value for n in self.tree.path_to(match.last_host_node)] or [new_slots[:0]])
        # The tree hands back `duplicate_slots` for the prefix, which here are its own slots.
        node = self.tree.insert(tokens, torch.cat((prefix, new_slots))).node
        self.tree.inc_lock_ref(node)
        self.tree.dec_lock_ref(match.last_host_node)
        self._write_through_hot(node)
        return node

    def release(self, node: TreeNode) -> None:
        """A request finished: unpin its prefix."""
        self.tree.dec_lock_ref(node)

    def _alloc_device(self, n: int) -> torch.Tensor:
        short = n - self.device_pool.free_slots
        if short > 0:
            freed, _ = self.tree.evict_device(short)
            for slots in freed:
                self.device_pool.free(slots)
                self.counters.device_evicted_tokens += len(slots)
        return self.device_pool.alloc(n)

    def _alloc_host(self, n: int) -> torch.Tensor:
        short = n - self.host_pool.free_slots
        if short > 0:
            for slots in self.tree.evict_host(short):
                self.host_pool.free(slots)
                self.counters.host_evicted_tokens += len(slots)
        return self.host_pool.alloc(n)

    def _load_back(self, last_device: TreeNode, last_host: TreeNode) -> None:
        path = self.tree.path_to(last_host)
        to_load = [n for n in path[len(self.tree.path_to(last_device)) :] if n.evicted]
        host_slots = torch.cat([n.host_value for n in to_load if n.host_value is not None])
        device_slots = self._alloc_device(len(host_slots))
        load_id = next(self._load_ids)
        self.controller.load(host_slots, device_slots, load_id)
        offset = 0
        for node in to_load:
            self.tree.record_load_back(node, device_slots[offset : offset + len(node.key)])
            offset += len(node.key)
        self.tree.inc_lock_ref(last_host)  # released when loading_check acks the load
        self.ongoing_load_back[load_id] = last_host
        self.counters.load_backs += 1

    def _write_through_hot(self, node: TreeNode) -> None:
        for n in self.tree.path_to(node):
            hot = n.hit_count >= self.config.write_through_threshold
            if not hot or n.backuped or n.evicted or n.id in self.ongoing_write_through:
                continue
            try:
                host_slots = self._alloc_host(len(n.key))
            except PoolExhausted:
                return
            assert n.device_value is not None
            self.controller.write(n.device_value, host_slots, n.id)
            self.tree.record_backup(n, host_slots)
            self.tree.inc_lock_ref(n)  # released when writing_check acks the write
            self.ongoing_write_through[n.id] = n
            self.counters.write_throughs += 1

    # -- the event round --------------------------------------------------
    def check_hicache_events(self) -> None:
        self.policy.at_round_start(self.work_list)
        if self.policy.skip_sync_when_idle and not self.ongoing_write_through and not self.ongoing_load_back:
            self._record_round(-1, -1)  # skipped: decided locally, no message
        elif self.policy.batched:
            view = self._counts_view
            view[0] = count_ready(self.controller.ack_write_queue)
            view[1] = count_ready(self.controller.ack_load_queue)
            writes, loads = self.sync.agree(self._counts).tolist()
            self._apply_writes(writes)
            self._apply_loads(loads)
            self._record_round(writes, loads)
        else:
            writes = self.writing_check()
            loads = self.loading_check()
            self._record_round(writes, loads)
        self.policy.at_round_end(self.work_list)

    def settle_events(self) -> None:
        """Wait for every queued copy and apply all acks, locally (no PP sync)."""
        self._apply_writes(len(self.controller.ack_write_queue))
        self._apply_loads(len(self.controller.ack_load_queue))

    def writing_check(self) -> int:
        count = self._agree_one(count_ready(self.controller.ack_write_queue))
        self._apply_writes(count)
        return count

    def loading_check(self) -> int:
        count = self._agree_one(count_ready(self.controller.ack_load_queue))
        self._apply_loads(count)
        return count

    def _record_round(self, writes: int, loads: int) -> None:
        """Fold the counts this round applied into a digest, checkpointed every so often.

        Every stage of a pipeline must apply the same counts in the same round; equal
        digests at the same round on all ranks say they did (report: pp_consistency).
        """
        self.digest = (self.digest * 1_000_003 + (writes + 2) * 65_537 + loads + 2) % _DIGEST_MOD
        self.event_rounds += 1
        if self.event_rounds % DIGEST_EVERY == 0:
            self.checkpoints.append((self.event_rounds, self.digest))

    def _agree_one(self, count: int) -> int:
        self._count_view[0] = count
        return self.sync.agree(self._count).item()

    def _apply_writes(self, n: int) -> None:
        if not n:  # the idle round's case: nothing to pop
            return
        for ack in self._pop_acks(self.controller.ack_write_queue, n, "write"):
            self.host_pool.complete_backup(ack.host_slots)
            for node_id in ack.node_ids:
                self.tree.dec_lock_ref(self.ongoing_write_through.pop(node_id))
            self.counters.writes_acked += 1

    def _apply_loads(self, n: int) -> None:
        if not n:
            return
        for ack in self._pop_acks(self.controller.ack_load_queue, n, "load"):
            for load_id in ack.node_ids:
                self.tree.dec_lock_ref(self.ongoing_load_back.pop(load_id))
            self.counters.loads_acked += 1

    @staticmethod
    def _pop_acks(queue: list[Ack], n: int, kind: str) -> list[Ack]:
        if n > len(queue):
            raise PPDesyncError(f"told to apply {n} {kind} acks, only {len(queue)} queued")
        popped, queue[:n] = queue[:n], []
        for ack in popped:
            ack.event.synchronize()  # a downstream stage may get a count before its copy ends
        return popped

    def close(self) -> None:
        self.controller.close()
