"""Agreeing on per-round event counts across TP ranks and down the PP pipeline.

Mirrors SGLang's `_all_reduce` + `_pp_sync` (PR #27285): PP0 takes the MIN of a count
across its stage's TP ranks; then PP0 and every intermediate stage `isend` a clone of the
count tensor to the next stage and keep the Work in the work list, while every stage
after PP0 first blocks in `recv` from the previous one and applies what it received.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.distributed as dist

from hicache_model.work_list import PendingSend, WorkList

FORWARD_TAG = 1  # the requests' messages; the HiCache sync's travel on another group


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
    # this rank's pipeline again, always gloo: the scheduler forwards requests over it
    # (SGLang: the world's CPU group, a connection apart from the HiCache sync's)
    requests: dist.ProcessGroup | None = None


def new_groups(topo: Topology, backend: str = "gloo") -> Groups:
    """Create the TP and PP groups. Every rank must call this, in the same order."""
    tp = pp = requests = None
    for p in range(topo.pp_size):
        group = dist.new_group(topo.tp_ranks(p), backend=backend) if topo.tp_size > 1 else None
        if p == topo.pp_rank:
            tp = group
    for t in range(topo.tp_size):
        group = dist.new_group(topo.pp_ranks(t), backend=backend) if topo.pp_size > 1 else None
        if t == topo.tp_rank:
            pp = group
    for t in range(topo.tp_size):
        group = dist.new_group(topo.pp_ranks(t), backend="gloo") if topo.pp_size > 1 else None
        if t == topo.tp_rank:
            requests = group
    return Groups(tp=tp, pp=pp, requests=requests)


class Blockable(Protocol):
    """Where a loop says what it is blocked on, for the probe to read (WorkList, Traffic)."""

    blocked_on: str | None
    blocked_peer: int | None


class RequestForwarding:
    """The scheduler's own traffic down the pipeline, which paces every stage to the next.

    SGLang's PP event loop (0.5.14, managers/scheduler_pp_mixin.py `event_loop_pp`) begins every
    microbatch round, busy or idle, with the requests: a stage after the first receives, in
    `recv`, what the stage before forwards (scheduler_components/request_receiver.py
    `_pull_raw_reqs`, utils/common.py `point_to_point_pyobj`); a stage before the last first
    waits the sends of its previous round (`_pp_commit_comm_work(self.send_req_work)`), then
    isends this round's (`_pp_send_pyobj_to_next_stage(recv_reqs, async_send=True)`: one size
    tensor, 0 when idle). On gloo that wait returns once the next stage has posted its receive,
    so a stage starts round i only when the next one has started round i - 1: PP0 runs at most
    a round ahead of PP1, and the HiCache sync's messages (docs/sglang.md) cannot pile up at
    PP1. Only the list of never-waited sync Works can grow, on every stage but the last.
    """

    def __init__(self, topo: Topology, group: dist.ProcessGroup | None, status: Blockable) -> None:
        self.group = group
        self.status = status
        pp_rank = topo.pp_rank
        self._recv_from = pp_rank - 1 if group is not None and pp_rank > 0 else None
        self._send_to = pp_rank + 1 if group is not None and topo.next_rank is not None else None
        self._size = torch.zeros(1, dtype=torch.long)
        self._pending: dist.Work | None = None
        self.forwarded = 0
        self._in_recv = f"request forwarding, waiting in recv from pp rank {pp_rank - 1}"
        self._in_wait = f"request forwarding, waiting on isend to pp rank {pp_rank + 1}"

    def forward(self, requests: int) -> None:
        """One round's: receive the stage before's requests, then forward this round's `requests`."""
        # The group's own methods (what dist.recv and dist.isend call): the PP sync's counting
        # of dist.isend and dist.recv (--target sglang) is not this traffic's.
        status, group = self.status, self.group
        if self._recv_from is not None:
            status.blocked_on, status.blocked_peer = self._in_recv, self._recv_from
            group.recv([self._size], self._recv_from, FORWARD_TAG).wait()
            status.blocked_on = status.blocked_peer = None
        if self._send_to is not None:
            if self._pending is not None:
                status.blocked_on, status.blocked_peer = self._in_wait, self._send_to
                self._pending.wait()
                status.blocked_on = status.blocked_peer = None
            self._pending = group.send([torch.tensor([requests], dtype=torch.long)], self._send_to, FORWARD_TAG)
            self.forwarded += 1


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
        self._on_cpu = self.message_device.type == "cpu"
        self.groups = groups
        self.work_list = work_list
        self.sent = 0
        self.received = 0
        self.tp_all_reduces = 0
        # Worked out once, not per message. A stage's rank in its PP group is its pp rank, and
        # the neighbours are addressed by group rank (group_src/group_dst), as SGLang's
        # _pp_sync does: torch then has no global rank to translate on every call.
        pp_rank = topo.pp_rank
        self._reduce_tp = pp_rank == 0 and topo.tp_size > 1
        self._recv_from = pp_rank - 1 if pp_rank > 0 else None
        self._send_to = pp_rank + 1 if topo.next_rank is not None else None
        self._next_global = topo.next_rank
        self._in_recv = f"PP sync, waiting in recv from pp rank {pp_rank - 1}"

    def agree(self, counts: torch.Tensor) -> torch.Tensor:
        """Return the counts every rank of the pipeline applies this round."""
        if not (self._on_cpu and counts.is_cpu) and counts.device != self.message_device:
            counts = counts.to(self.message_device)  # (reading .device makes an object: checked only off the CPU)
        works = self.work_list
        if self._recv_from is None:
            if self._reduce_tp:
                dist.all_reduce(counts, op=dist.ReduceOp.MIN, group=self.groups.tp)
                self.tp_all_reduces += 1
        else:
            works.blocked_on, works.blocked_peer = self._in_recv, self._recv_from
            dist.recv(counts, group=self.groups.pp, group_src=self._recv_from)
            works.blocked_on = works.blocked_peer = None
            self.received += 1
        if self._send_to is not None:
            data = counts.clone()
            try:
                work = dist.isend(data, group=self.groups.pp, group_dst=self._send_to)
            except RuntimeError as exc:
                if self._next_global in works.timed_out_peers:
                    raise ClosedAfterTimeout(self._next_global) from exc
                raise
            works.append(PendingSend(work, data, self._next_global, time.monotonic(), self._send_to))
            self.sent += 1
        return counts
