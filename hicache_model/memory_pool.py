"""Device and host KV pools: real tensors, one row of KV per token slot.

The device pool lives on the chosen device (a GPU when there is one). The host pool is
pinned when CUDA is present, so that copies to and from the device can run
asynchronously, as SGLang's `MHATokenToKVPoolHost` does. Host slots move through an
explicit state machine that refuses transitions the cache controller should never make.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class KVShape:
    layers: int = 2
    heads: int = 4
    head_dim: int = 16
    dtype: torch.dtype = torch.float16

    @property
    def row_elements(self) -> int:
        return 2 * self.layers * self.heads * self.head_dim  # K and V

    @property
    def bytes_per_token(self) -> int:
        return self.row_elements * torch.empty(0, dtype=self.dtype).element_size()


class PoolExhausted(RuntimeError):
    """More slots were asked for than are free, even after eviction."""


class _SlotPool:
    def __init__(self, size: int, shape: KVShape, device: torch.device, pin: bool) -> None:
        if size < 1:
            raise ValueError("a KV pool needs at least one slot")
        self.size = size
        self.shape = shape
        self.kv = torch.zeros((size, shape.row_elements), dtype=shape.dtype, device=device, pin_memory=pin)
        self._free = torch.arange(size, dtype=torch.int64)
        self._in_use = torch.zeros(size, dtype=torch.bool)

    @property
    def free_slots(self) -> int:
        return int(self._free.numel())

    def alloc(self, n: int) -> torch.Tensor:
        if n < 0:
            raise ValueError(f"cannot allocate {n} slots")
        if n > self.free_slots:
            raise PoolExhausted(f"asked for {n} slots, {self.free_slots} free of {self.size}")
        taken, self._free = self._free[:n], self._free[n:]
        self._in_use[taken] = True
        return taken

    def free(self, slots: torch.Tensor) -> None:
        if not slots.numel():
            return
        slots = slots.to(torch.int64)
        if not bool(self._in_use[slots].all()) or slots.unique().numel() != slots.numel():
            raise ValueError("freeing a slot that is not allocated (double free)")
        self._in_use[slots] = False
        self._free = torch.cat((self._free, slots))


class DeviceKVPool(_SlotPool):
    def __init__(self, size: int, shape: KVShape, device: torch.device) -> None:
        super().__init__(size, shape, device, pin=False)


class HostSlotState(enum.IntEnum):
    FREE = 0
    RESERVED = 1  # allocated for a write-through that has not finished
    BACKUP = 2  # holds a finished copy of device KV


_ALLOWED = {
    (HostSlotState.FREE, HostSlotState.RESERVED),
    (HostSlotState.RESERVED, HostSlotState.BACKUP),
    (HostSlotState.BACKUP, HostSlotState.FREE),
}


class InvalidSlotTransition(RuntimeError):
    pass


class HostKVPool(_SlotPool):
    def __init__(self, size: int, shape: KVShape, pin: bool) -> None:
        super().__init__(size, shape, torch.device("cpu"), pin=pin)
        self.state = torch.full((size,), int(HostSlotState.FREE), dtype=torch.uint8)

    def alloc(self, n: int) -> torch.Tensor:
        slots = super().alloc(n)
        self._move(slots, HostSlotState.FREE, HostSlotState.RESERVED)
        return slots

    def complete_backup(self, slots: torch.Tensor) -> None:
        self._move(slots, HostSlotState.RESERVED, HostSlotState.BACKUP)

    def free(self, slots: torch.Tensor) -> None:
        self._move(slots, HostSlotState.BACKUP, HostSlotState.FREE)
        super().free(slots)

    def _move(self, slots: torch.Tensor, src: HostSlotState, dst: HostSlotState) -> None:
        if (src, dst) not in _ALLOWED:
            raise InvalidSlotTransition(f"{src.name} -> {dst.name} is not a host slot transition")
        current = self.state[slots]
        if bool((current != int(src)).any()):
            bad = HostSlotState(int(current[current != int(src)][0]))
            raise InvalidSlotTransition(f"slot in state {bad.name}, expected {src.name} to move to {dst.name}")
        self.state[slots] = int(dst)
