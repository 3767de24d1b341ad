"""Synthetic cache modules shaped like each SGLang release family, and a fake checkout of them.

None of this is SGLang's code: the classes are small stand-ins written for these tests, with
the same class names, method names and call shapes as the releases they mimic, and bodies of
their own. What the tests rely on:

- NO_PP_SYNC (like 0.5.12): an event round without `_pp_sync`; not applicable.
- REAP (like 0.5.13/0.5.14): `_pp_sync` appends each isend's Work to `self.work_list`;
  `_reap_completed_async_work` pops only Works that report `is_completed()`; one method reads
  an undefined global `StorageMetrics` (an unresolved name).
- DRAIN (like 0.5.15): `_drain_async_work` waits on every Work and clears the list, first in
  the round. DRAIN_TAGGED (like 0.5.16): the same with `tag=P2PTag.HICACHE_PP_SYNC`.
- UNIFIED (like 0.5.20+): UnifiedRadixCache whose round syncs an int64 vector [write, load,
  digest, -digest]; `_sync_hicache_ready_counts` carries a decorator nobody defines.

The sources hold no blank lines inside method bodies, except BLANK_LINES, which exists to
show where they go.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from hicache_cli.sglang_target.locate import VERSION_FILE

NO_PP_SYNC = '''\
"""Synthetic: a HiCache module without PP sync (shaped like 0.5.12)."""
import logging
import torch
logger = logging.getLogger(__name__)


class HiRadixCache:
    def __init__(self, tp_group):
        self.tp_group = tp_group

    def _all_reduce_attn_groups(self, counts):
        if self.tp_group is not None:
            torch.distributed.all_reduce(counts, op=torch.distributed.ReduceOp.MIN, group=self.tp_group)

    def writing_check(self):
        done = sum(1 for _, event in self.cache_controller.ack_write_queue if event.query())
        counts = torch.tensor([done], dtype=torch.int)
        self._all_reduce_attn_groups(counts)
        return int(counts.item())

    def loading_check(self):
        return 0

    def check_hicache_events(self):
        self.writing_check()
        self.loading_check()
'''

REAP = '''\
"""Synthetic: PP sync whose Works are reaped when completed (shaped like 0.5.13/0.5.14)."""
from __future__ import annotations
import logging
from typing import Optional
import torch
from sglang.srt.mem_cache.base_prefix_cache import BasePrefixCache
logger = logging.getLogger(__name__)


class HiRadixCache(BasePrefixCache):
    """A synthetic cache class."""

    def __init__(self, pp_group, pp_rank, pp_size):
        self.pp_group = pp_group
        self.pp_rank = pp_rank
        self.pp_size = pp_size
        self.work_list = []

    def _all_reduce(self, counts: torch.Tensor) -> None:
        if self.tp_world_size <= 1 or self.tp_group is None:
            return
        torch.distributed.all_reduce(counts, op=torch.distributed.ReduceOp.MIN, group=self.tp_group)

    def _all_reduce_attn_groups(self, counts: torch.Tensor) -> None:
        self._all_reduce(counts)
        for group in (self.attn_cp_group, self.attn_tp_group):
            if group is not None:
                torch.distributed.all_reduce(counts, op=torch.distributed.ReduceOp.MIN, group=group)

    def _pp_sync(self, counts: torch.Tensor) -> None:
        if self.pp_size <= 1 or self.pp_group is None:
            return
        if self.pp_rank > 0:
            torch.distributed.recv(counts, group_src=self.pp_rank - 1, group=self.pp_group)
        if self.pp_rank < self.pp_size - 1:
            outgoing = counts.clone()
            work = torch.distributed.isend(outgoing, group_dst=self.pp_rank + 1, group=self.pp_group, tag=2)
            self.work_list.append(work)

    def _reap_completed_async_work(self) -> None:
        while self.work_list and self.work_list[0].is_completed():
            self.work_list.pop(0)

    def writing_check(self, limit: Optional[int] = None) -> int:
        queue = self.cache_controller.ack_write_queue
        ready = 0
        for ack_id, finish_event in queue:
            if not finish_event.query() or (limit is not None and ready >= limit):
                break
            ready += 1
        counts = torch.tensor([ready], dtype=torch.int)
        self._all_reduce_attn_groups(counts)
        self._pp_sync(counts)
        for _ in range(int(counts.item())):
            ack_id, _event = queue.pop(0)
            self.ongoing_write_through.pop(ack_id, None)
        return int(counts.item())

    def loading_check(self, budget: HostBudget | None = None) -> LoadResult:
        finished = [ack for ack, event in self.cache_controller.ack_load_queue if event.query()]
        try:
            counts = torch.tensor([len(finished)], dtype=torch.int)
        except RuntimeError as err:
            logger.warning("cannot count loads: %s", err)
            return 0
        self._all_reduce_attn_groups(counts)
        self._pp_sync(counts)
        for ack_id in finished[: int(counts.item())]:
            self.ongoing_load_back.pop(ack_id, None)
        return int(counts.item())

    def check_hicache_events(self) -> None:
        self.writing_check()
        self.loading_check()
        self._reap_completed_async_work()
        if self.enable_storage_metrics:
            self.storage_metrics_collector.log(StorageMetrics())
'''

_DRAIN_METHOD = """\
    def _drain_async_work(self) -> None:
        for work in self.work_list:
            work.wait()
        self.work_list.clear()

"""

DRAIN = (
    REAP.replace("reaped when completed (shaped like 0.5.13/0.5.14)", "drained every round (shaped like 0.5.15)")
    .replace(
        """    def _reap_completed_async_work(self) -> None:
        while self.work_list and self.work_list[0].is_completed():
            self.work_list.pop(0)

""",
        _DRAIN_METHOD,
    )
    .replace(
        "    def check_hicache_events(self) -> None:\n",
        "    def check_hicache_events(self) -> None:\n        self._drain_async_work()\n",
    )
    .replace("        self._reap_completed_async_work()\n", "")
)

DRAIN_TAGGED = (
    DRAIN.replace("(shaped like 0.5.15)", "(shaped like 0.5.16)")
    .replace("tag=2", "tag=P2PTag.HICACHE_PP_SYNC")
    .replace("import torch\n", "import torch\nfrom sglang.srt.distributed.communication_tags import P2PTag\n", 1)
)

UNIFIED = '''\
"""Synthetic: one radix cache, an int64 vector synced per round (shaped like 0.5.20+)."""
from __future__ import annotations
import torch
from sglang.srt.distributed.communication_tags import P2PTag
from sglang.srt.utils.consensus import rank_consensus


class UnifiedRadixCache:
    def _all_reduce(self, vector: torch.Tensor) -> None:
        if self.tp_world_size <= 1 or self.tp_group is None:
            return
        torch.distributed.all_reduce(vector, op=torch.distributed.ReduceOp.MIN, group=self.tp_group)

    def _pp_sync(self, vector: torch.Tensor) -> None:
        if self.pp_size <= 1 or self.pp_group is None:
            return
        if self.pp_rank > 0:
            torch.distributed.recv(vector, group_src=self.pp_rank - 1, group=self.pp_group)
        if self.pp_rank < self.pp_size - 1:
            work = torch.distributed.isend(
                vector.clone(), group_dst=self.pp_rank + 1, group=self.pp_group, tag=P2PTag.HICACHE_PP_SYNC
            )
            self.work_list.append(work)

    def _drain_async_work(self) -> None:
        pending, self.work_list = self.work_list, []
        for work in pending:
            work.wait()

    def _count_ready_acks(self, queue: list) -> int:
        return next((i for i, (_, event) in enumerate(queue) if not event.query()), len(queue))

    @rank_consensus(same_params=True)
    def _sync_hicache_ready_counts(self) -> torch.Tensor:
        digest = self.tree_core.write_back_duplicate_reclaim_digest
        vector = torch.tensor(
            [
                self._count_ready_acks(self.cache_controller.ack_write_queue),
                self._count_ready_acks(self.cache_controller.ack_load_queue),
                digest,
                -digest,
            ],
            dtype=torch.int64,
        )
        self._all_reduce(vector)
        self._pp_sync(vector)
        if int(vector[2]) != -int(vector[3]):
            raise RuntimeError("ranks disagree on the reclaim digest")
        return vector

    def check_hicache_events(self) -> None:
        if self.linker is not None:
            self.linker.poll()
        self._drain_async_work()
        self.flush_pending_backups()
        vector = self._sync_hicache_ready_counts()
        for _ in range(int(vector[0])):
            self.cache_controller.ack_write_queue.pop(0)
        for _ in range(int(vector[1])):
            self.cache_controller.ack_load_queue.pop(0)
'''

# The least a class needs to be applicable: the round and `_pp_sync`, no drain method.
MINIMAL = """\
class HiRadixCache:
    def check_hicache_events(self):
        pass

    def _pp_sync(self):
        pass
"""

# A method body with blank lines in it (and in its docstring): where a traceback points.
BLANK_LINES = '''\
class HiRadixCache:
    def _pp_sync(self, counts):
        return None

    def check_hicache_events(self):
        """Raise from below two blank lines.

        (The docstring has one too.)
        """
        first = 1

        raise ValueError(f"raised on purpose after {first}")
'''

TAGS = '''\
"""Synthetic: point-to-point tags (shaped like communication_tags.py)."""
from enum import IntEnum


class P2PTag(IntEnum):
    HICACHE_PP_SYNC = 1234
'''

# What setuptools-scm generates into wheels and installs (locate.VERSION_FILE), and the
# fallback literal a checkout's sglang/version.py holds, which is never read.
VERSION = '__version__ = version = "9.9.9"\n__version_tuple__ = version_tuple = (9, 9, 9)\n'
FALLBACK_VERSION = '__version__ = "0.0.0.dev0"\n'

HIRADIX_REL = "sglang/srt/mem_cache/hiradix_cache.py"
UNIFIED_REL = "sglang/srt/mem_cache/unified_radix_cache.py"
TAGS_REL = "sglang/srt/distributed/communication_tags.py"
VERSION_REL = VERSION_FILE
FALLBACK_VERSION_REL = "sglang/version.py"


def def_line(source: str, name: str) -> int:
    """The 1-based line of `def name(` in source."""
    for number, line in enumerate(source.splitlines(), start=1):
        if re.match(rf"\s*def {re.escape(name)}\(", line):
            return number
    raise AssertionError(f"no def {name} in the source")


def make_checkout(
    root: Path,
    hiradix: str | None = REAP,
    unified: str | None = UNIFIED,
    tags: bool = True,
    version: str | None = VERSION,
) -> Path:
    """A fake SGLang checkout: root/python/sglang/... with the given modules; returns root.
    A module given as None is left out; `version` is the generated version file's text."""
    package = root / "python"
    files = {
        HIRADIX_REL: hiradix,
        UNIFIED_REL: unified,
        TAGS_REL: TAGS if tags else None,
        FALLBACK_VERSION_REL: FALLBACK_VERSION,
        VERSION_REL: version,  # last: wins should the two paths ever be the same
    }
    (package / "sglang" / "srt" / "mem_cache").mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        if text is not None:
            path = package / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return root


def make_wheel(path: Path, hiradix: str = DRAIN_TAGGED, extra: dict[str, str] | None = None) -> Path:
    """A small zip shaped like an sglang wheel: the synthetic modules under sglang/, plus `extra`."""
    members = {
        HIRADIX_REL: hiradix,
        UNIFIED_REL: UNIFIED,
        TAGS_REL: TAGS,
        FALLBACK_VERSION_REL: FALLBACK_VERSION,
        VERSION_REL: VERSION,
        **(extra or {}),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return path
