"""The cache controller: asynchronous write-through and load-back with ack queues.

Like SGLang's `HiCacheController`, each copy is submitted to a copy stream and an entry
(completion event, node ids) is appended to `ack_write_queue` or `ack_load_queue`. The
event round counts how many entries at the head of a queue are done and, once the
pipeline agrees on that count, pops exactly that many.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hicache_model.memory_pool import DeviceKVPool, HostKVPool
from hicache_model.streams import CompletionEvent, CopyStream


@dataclass(slots=True)
class Ack:
    event: CompletionEvent
    node_ids: list[int]  # writes: tree node ids; loads: load ids
    host_slots: torch.Tensor  # for writes: the slots to mark as a finished backup


class CacheController:
    def __init__(self, device_pool: DeviceKVPool, host_pool: HostKVPool, stream: CopyStream) -> None:
        self.device_pool = device_pool
        self.host_pool = host_pool
        self.stream = stream
        self.ack_write_queue: list[Ack] = []
        self.ack_load_queue: list[Ack] = []

    def write(self, device_slots: torch.Tensor, host_slots: torch.Tensor, node_id: int) -> None:
        """Copy device KV to the host (write-through)."""
        src, dst = self.device_pool.kv, self.host_pool.kv
        dev_index = device_slots.to(src.device)

        def copy() -> None:
            dst.index_copy_(0, host_slots, src.index_select(0, dev_index).to("cpu"))

        self.ack_write_queue.append(Ack(self.stream.submit(copy), [node_id], host_slots))

    def load(self, host_slots: torch.Tensor, device_slots: torch.Tensor, load_id: int) -> None:
        """Copy host KV back to the device (load-back)."""
        src, dst = self.host_pool.kv, self.device_pool.kv
        dev_index = device_slots.to(dst.device)

        def copy() -> None:
            dst.index_copy_(0, dev_index, src.index_select(0, host_slots).to(dst.device, non_blocking=True))

        self.ack_load_queue.append(Ack(self.stream.submit(copy), [load_id], host_slots))

    def close(self) -> None:
        self.stream.close()


def count_ready(queue: list[Ack]) -> int:
    """How many acks at the head of `queue` have finished (the count a round agrees on)."""
    ready = 0
    for ack in queue:
        if not ack.event.query():
            break
        ready += 1
    return ready
