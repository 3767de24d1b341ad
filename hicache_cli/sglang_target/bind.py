"""Rank side of `--target sglang`: compile SGLang's methods onto a holder and drive them.

The holder carries what the methods read: the PP/TP layout and groups, SGLang's own
`work_list` (a plain list of torch Works), a cache controller whose ack queues stay empty,
and the attributes newer releases touch, set to their "no storage, no linker, plain host
cache" values. With empty ack queues every round still runs the real all-reduce and
`_pp_sync` (the path that leaked) and the real drain or reap; the ack-processing loops
find nothing to apply.

torch.distributed's isend/recv/all_reduce are wrapped with counters (the same calls, the
same Works returned) so that the probe can report sends, receives and payload bytes.
"""

from __future__ import annotations
import __future__

import ast
import builtins
import enum
import logging
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist

from hicache_cli.errors import HicacheError
from hicache_cli.sglang_target.extract import ENTRY, ExtractedClass, read_int_enum

HOST_MEMORY_MODE = "cache"  # UnifiedRadixCache's default (the other is "buffer_only")


class TargetMismatch(HicacheError):
    """The file changed between the CLI's check and the rank's read."""


@dataclass
class AckController:
    """The part of SGLang's HiCacheController the event round reads: two ack queues."""

    ack_write_queue: list = field(default_factory=list)
    ack_load_queue: list = field(default_factory=list)


@dataclass
class Traffic:
    """Counts of the collective calls the methods made, and what the loop is blocked in."""

    sent: int = 0
    sent_bytes: int = 0
    received: int = 0
    all_reduces: int = 0
    blocked_on: str | None = None
    blocked_peer: int | None = None  # the pp rank the loop waits on, while blocked
    # what blocked_on and blocked_peer say while in recv
    in_recv: str = "SGLang _pp_sync, in recv from the previous stage"
    in_recv_peer: int | None = None


class CountingCollectives:
    """Wraps torch.distributed's isend, recv and all_reduce with counters; same arguments,
    same results. Installed for the life of the rank process."""

    def __init__(self, traffic: Traffic) -> None:
        self.traffic = traffic
        self._isend, self._recv, self._all_reduce = dist.isend, dist.recv, dist.all_reduce
        dist.isend, dist.recv, dist.all_reduce = self.isend, self.recv, self.all_reduce

    def isend(self, tensor: torch.Tensor, *args: Any, **kwargs: Any):  # noqa: ANN201 - a torch Work
        __tracebackhide__ = True  # `hicache trace` names SGLang's line, not this wrapper
        work = self._isend(tensor, *args, **kwargs)
        traffic = self.traffic
        traffic.sent += 1
        traffic.sent_bytes += tensor.nbytes
        return work

    def recv(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        traffic = self.traffic
        traffic.blocked_on, traffic.blocked_peer = traffic.in_recv, traffic.in_recv_peer
        try:
            result = self._recv(tensor, *args, **kwargs)
        finally:
            traffic.blocked_on = traffic.blocked_peer = None
        traffic.received += 1
        return result

    def all_reduce(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        self.traffic.all_reduces += 1
        return self._all_reduce(tensor, *args, **kwargs)


class TreeCore:
    """What UnifiedRadixCache's round reads from its tree core: a reclaim digest, equal everywhere."""

    write_back_duplicate_reclaim_digest = 0


class SGLangHolder:
    """Stands in for the cache object `self` in SGLang's methods; they are bound onto it."""

    def __init__(self, pp_rank: int, pp_size: int, pp_group: Any, tp_group: Any, tp_size: int) -> None:
        self.pp_rank = pp_rank
        self.pp_size = pp_size
        self.pp_group = pp_group
        self.tp_group = tp_group
        self.tp_world_size = tp_size
        self.attn_cp_group = None
        self.attn_tp_group = None
        self.work_list: list = []  # SGLang's own list of PP-sync Works
        self.cache_controller = AckController()
        self.ongoing_write_through: dict = {}
        self.ongoing_load_back: dict = {}
        self.enable_storage = False
        self.enable_storage_metrics = False
        self.storage_metrics_collector = None
        self.metrics_collector = None
        self.linker = None
        self.buffer_pipeline = None
        self.host_memory_mode = HOST_MEMORY_MODE
        self.tree_core = TreeCore()

    def flush_pending_backups(self) -> None:
        """Newer releases flush backups queued outside the round; there are none here."""


def compile_methods(extracted: ExtractedClass, tags_file: Path | None) -> dict[str, types.FunctionType]:
    """Compile each method with its own file name and line numbers, in one namespace."""
    namespace: dict[str, Any] = {
        "__builtins__": builtins,
        "__name__": f"hicache_sglang_target.{extracted.class_name}",
        "torch": torch,
        "logger": logging.getLogger("sglang.srt.mem_cache"),
        **{name: getattr(typing, name) for name in typing.__all__},
    }
    if extracted.uses_p2p_tag:
        namespace["P2PTag"] = _p2p_tag(tags_file)
    flags = __future__.annotations.compiler_flag
    for method in extracted.methods.values():
        tree = ast.parse(method.source)
        ast.increment_lineno(tree, method.first_line - 1)
        exec(compile(tree, extracted.path, "exec", flags=flags, dont_inherit=True), namespace)  # noqa: S102
    return {name: namespace[name] for name in extracted.methods}


def _p2p_tag(tags_file: Path | None) -> type[enum.IntEnum]:
    """P2PTag rebuilt from the values in the tags file, read with ast: the file never runs."""
    if tags_file is None:
        raise HicacheError("these methods use P2PTag, but this SGLang has no distributed/communication_tags.py")
    return enum.IntEnum("P2PTag", read_int_enum(tags_file, "P2PTag"), module="sglang_communication_tags")


def bind(holder: SGLangHolder, functions: dict[str, types.FunctionType]) -> None:
    for name, fn in functions.items():
        setattr(holder, name, types.MethodType(fn, holder))


class Forwards(Protocol):
    """The scheduler's request forwarding down the pipeline (hicache_model/pp_sync.RequestForwarding)."""

    def forward(self, requests: int) -> None: ...


class SGLangRound:
    """One scheduler round of SGLang's event loop: the requests passed down the pipeline (the
    scheduler's own, hicache_model/pp_sync.RequestForwarding, an idle server's: none), then
    `check_hicache_events` on the holder."""

    def __init__(self, holder: SGLangHolder, extracted: ExtractedClass, forwarding: Forwards | None = None) -> None:
        self.holder = holder
        self.extracted = extracted
        self.forwarding = forwarding
        self.round = 0
        self._entry = getattr(holder, ENTRY)
        self._forwarded = False

    def forward_requests(self) -> None:
        """The round's first step, as in the model (hicache_model/scheduler.py): an idle server's, none."""
        self._forwarded = True
        if self.forwarding is not None:
            self.forwarding.forward(0)

    def run_round(self) -> None:
        if not self._forwarded:
            self.forward_requests()
        self._forwarded = False
        self._entry()
        self.round += 1


def build(
    extracted: ExtractedClass,
    tags_file: Path | None,
    expected_sha256: str,
    holder: SGLangHolder,
    forwarding: Forwards | None = None,
) -> SGLangRound:
    if extracted.sha256 != expected_sha256:
        raise TargetMismatch(f"{extracted.path} changed after the run was set up (its SHA-256 differs)")
    bind(holder, compile_methods(extracted, tags_file))
    return SGLangRound(holder, extracted, forwarding)
