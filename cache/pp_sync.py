"""Agreeing on per-round event counts across TP ranks and down the PP pipeline.

Mirrors SGLang's `_all_reduce` + `_pp_sync` (PR #27285): PP0 takes the MIN of a count
across its stage's TP ranks; then PP0 and every intermediate stage `isend` a clone of the
count tensor to the next stage and keep the Work in the work list, while every stage
after PP0 first blocks in `recv` from the previous one and applies what it received.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from cache.work_list import PendingSend, WorkList


@dataclass(frozen=True)
class Topology:
    """Where one rank sits: global rank = pp_rank * tp_size + tp_rank (SGLang's layout)."""

    rank: int
    pp_size: int
    tp_size: int

    @property
    def pp_rank(self) -> int:
        return self.rank // self.tp_size

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp_size

    @property
    def world_size(self) -> int:
        return self.pp_size * self.tp_size

    @property
    def prev_rank(self) -> int | None:
        return self.rank - self.tp_size if self.pp_rank > 0 else None

    @property
    def next_rank(self) -> int | None:
        return self.rank + self.tp_size if self.pp_rank < self.pp_size - 1 else None

    def tp_ranks(self, pp_rank: int) -> list[int]:
        return [pp_rank * self.tp_size + t for t in range(self.tp_size)]

    def pp_ranks(self, tp_rank: int) -> list[int]:
        return [p * self.tp_size + tp_rank for p in range(self.pp_size)]


@dataclass
class Groups:
    tp: dist.ProcessGroup | None  # this rank's stage; None when tp_size == 1
    pp: dist.ProcessGroup | None  # this rank's pipeline; None when pp_size == 1


def new_groups(topo: Topology, backend: str = "gloo") -> Groups:
    """Create the TP and PP groups. Every rank must call this, in the same order."""
    tp = pp = None
    for p in range(topo.pp_size):
        group = dist.new_group(topo.tp_ranks(p), backend=backend) if topo.tp_size > 1 else None
        if p == topo.pp_rank:
            tp = group
    for t in range(topo.tp_size):
        group = dist.new_group(topo.pp_ranks(t), backend=backend) if topo.pp_size > 1 else None
        if t == topo.tp_rank:
            pp = group
    return Groups(tp=tp, pp=pp)


class ClosedAfterTimeout(RuntimeError):
    def __init__(self, peer: int) -> None:
        super().__init__(
            f"isend to rank {peer} failed: an earlier timed-out wait on a send to it closed the "
            "gloo connection (gloo closes a pair when a wait times out)"
        )
        self.peer = peer


class PPSync:
    def __init__(
        self, topo: Topology, groups: Groups, work_list: WorkList, message_device: torch.device | None = None
    ) -> None:
        self.topo = topo
        # Where the count tensors travel from: the CPU for gloo groups (SGLang's PP sync),
        # the rank's GPU for NCCL groups.
        self.message_device = message_device or torch.device("cpu")
        self.groups = groups
        self.work_list = work_list
        self.sent = 0
        self.received = 0
        self.tp_all_reduces = 0

    def agree(self, counts: torch.Tensor) -> torch.Tensor:
        """Return the counts every rank of the pipeline applies this round."""
        topo = self.topo
        if counts.device != self.message_device:
            counts = counts.to(self.message_device)
        if topo.pp_rank == 0:
            if topo.tp_size > 1:
                dist.all_reduce(counts, op=dist.ReduceOp.MIN, group=self.groups.tp)
                self.tp_all_reduces += 1
        else:
            self.work_list.blocked_on = f"PP sync, waiting in recv from pp rank {topo.pp_rank - 1}"
            self.work_list.blocked_peer = topo.pp_rank - 1
            dist.recv(counts, src=topo.prev_rank, group=self.groups.pp)
            self.work_list.blocked_on = self.work_list.blocked_peer = None
            self.received += 1
        if topo.next_rank is not None:
            data = counts.clone()
            try:
                work = dist.isend(data, dst=topo.next_rank, group=self.groups.pp)
            except RuntimeError as exc:
                if topo.next_rank in self.work_list.timed_out_peers:
                    raise ClosedAfterTimeout(topo.next_rank) from exc
                raise
            self.work_list.append(PendingSend(work, data, topo.next_rank, time.monotonic(), topo.pp_rank + 1))
            self.sent += 1
        return counts
