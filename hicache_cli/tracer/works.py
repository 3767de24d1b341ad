"""Every Work torch.distributed hands out, counted by where it was created.

The hooks sit on the C++ classes, not on the Python functions: each ProcessGroup method
that returns a Work (send, recv, allreduce, ...), and Work.wait. So `dist.isend`,
`batch_isend_irecv` (whose P2POp insists that its op *is* `dist.isend`), async
collectives and direct `group.send` calls are all seen, whatever names the program
imported them under, and nothing the program holds is replaced.

A Work is *live* from its creation until it is waited or the program drops its last
reference to it. The table holds one weak reference per live Work (never the Work) and
at most MAX_SITES sites; the rest are pooled in one "other sites" entry.

Stdlib only; the classes to patch are passed in, so the table is tested with fakes.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# ProcessGroup methods that return a Work; those a torch lacks are skipped.
WORK_METHODS = (
    "send",
    "recv",
    "recv_anysource",
    "allreduce",
    "allreduce_coalesced",
    "allgather",
    "allgather_coalesced",
    "allgather_into_tensor_coalesced",
    "_allgather_base",
    "all_gather_single",
    "all_gather_single_coalesced",
    "all_to_all_single",
    "alltoall",
    "alltoall_base",
    "barrier",
    "broadcast",
    "gather",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_single",
    "reduce_scatter_single_coalesced",
    "reduce_scatter_tensor_coalesced",
    "_reduce_scatter_base",
    "scatter",
)
SEND_METHODS = ("send",)
RECV_METHODS = ("recv", "recv_anysource")
WAIT_METHODS = ("wait", "synchronize")
MAX_SITES = 256
SITES_REPORTED = 20
OTHER = ("(other sites)", 0, "", "", None)


@dataclass
class Site:
    file: str
    line: int
    function: str
    op: str
    peer: int | None
    created: int = 0
    waited: int = 0
    completed: int = 0  # seen complete by the program: wait() returned, or is_completed() was true
    dropped: int = 0  # released by the program without a wait()
    live_bytes: int = 0
    live_max: int = 0  # the most live at once: a leak released at exit still shows here

    @property
    def live(self) -> int:
        return self.created - self.waited - self.dropped

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "op": self.op,
            "peer": self.peer,
            "created": self.created,
            "waited": self.waited,
            "completed": self.completed,
            "dropped": self.dropped,
            "live": self.live,
            "live_max": self.live_max,
            "live_bytes": self.live_bytes,
        }


class _WorkRef(weakref.ref):
    """The table's only hold on a Work: weak, with the site it was made at."""

    __slots__ = ("site", "nbytes", "seen_complete")

    def __new__(cls, work: object, callback: Callable[[_WorkRef], None], site: Site, nbytes: int) -> _WorkRef:
        return super().__new__(cls, work, callback)

    def __init__(self, work: object, callback: Callable[[_WorkRef], None], site: Site, nbytes: int) -> None:
        super().__init__(work, callback)
        self.site = site
        self.nbytes = nbytes
        self.seen_complete = False


class WorkTable:
    """Counts by site; `live` = created - waited - dropped. Thread-safe enough for the
    counts (one lock), and garbage-collector-safe: a weak-reference callback only counts
    and queues its reference for removal, it never resizes a dict mid-operation."""

    def __init__(self, skip_prefixes: tuple[str, ...] = (), max_sites: int = MAX_SITES) -> None:
        self.skip_prefixes = tuple(os.path.normcase(p) for p in skip_prefixes)
        self.max_sites = max_sites
        self.sites: dict[tuple[Any, ...], Site] = {}
        self.created = self.waited = self.completed = self.dropped = 0
        self.sent = self.received = 0
        self.live_bytes = 0
        self.blocked_on: str | None = None  # what the program waits on right now
        self._refs: dict[int, _WorkRef] = {}
        self._gone: deque[_WorkRef] = deque()
        self._lock = threading.RLock()
        self._foreign: dict[Any, bool] = {}  # code object -> outside torch (and not hidden)?
        self._peers: dict[tuple[int, int], int | None] = {}

    @property
    def live(self) -> int:
        return self.created - self.waited - self.dropped

    # -- the program's side ------------------------------------------------------------

    def created_work(self, work: object, op: str, peer: int | None, frame: Any, nbytes: int = 0) -> None:
        site = self._site(op, peer, frame)
        try:
            ref: _WorkRef | None = _WorkRef(work, self._collected, site, nbytes)
        except TypeError:  # a Work type without weak references: counted as created and waited
            ref, site.waited, self.waited = None, site.waited + 1, self.waited + 1
        with self._lock:
            self._flush()
            if ref is not None:
                self._refs[id(ref)] = ref
            site.created += 1
            site.live_bytes += nbytes
            if site.live > site.live_max:
                site.live_max = site.live
            self.created += 1
            self.live_bytes += nbytes
            if op in SEND_METHODS or op == "isend":
                self.sent += 1
            elif op in RECV_METHODS or op == "irecv":
                self.received += 1

    def waited_work(self, work: object) -> None:
        ref = _ref_of(work)
        if ref is None:
            return
        with self._lock:
            if self._refs.pop(id(ref), None) is None:
                return  # waited before: counted once
            site = ref.site
            site.waited += 1
            site.live_bytes -= ref.nbytes
            self.waited += 1
            self.live_bytes -= ref.nbytes
            if not ref.seen_complete:
                ref.seen_complete = True
                site.completed += 1
                self.completed += 1

    def seen_complete(self, work: object) -> None:
        ref = _ref_of(work)
        if ref is None or ref.seen_complete:
            return
        with self._lock:
            ref.seen_complete = True
            ref.site.completed += 1
            self.completed += 1

    def _collected(self, ref: _WorkRef) -> None:
        """The program let go of a Work it never waited (weakref callback: count, queue)."""
        if id(ref) not in self._refs:
            return  # waited already
        site = ref.site
        site.dropped += 1
        site.live_bytes -= ref.nbytes
        self.dropped += 1
        self.live_bytes -= ref.nbytes
        self._gone.append(ref)

    def _flush(self) -> None:
        while self._gone:
            self._refs.pop(id(self._gone.popleft()), None)

    # -- where a Work was created -----------------------------------------------------

    def _site(self, op: str, peer: int | None, frame: Any) -> Site:
        """The first frame outside torch (and outside functions that hide themselves with a
        local `__tracebackhide__`, as pytest's helpers do); the op is the torch.distributed
        function the program called, when there is one."""
        foreign = self._foreign
        inner = outer = None
        while frame is not None:
            code = frame.f_code
            outside = foreign.get(code)
            if outside is None:
                outside = foreign[code] = self._is_foreign(code)
            if outside:
                break
            if code.co_filename.endswith("distributed_c10d.py") and not code.co_name.startswith("_"):
                inner, outer = inner or code.co_name, code.co_name
            frame = frame.f_back
        if outer is not None:  # the call the program made: recv (not the irecv under it), but
            op = f"{outer}({inner})" if outer == "batch_isend_irecv" else outer  # a batch's isend/irecv
        if frame is None:
            key: tuple[Any, ...] = ("(torch internals)", 0, "", op, peer)
        else:
            key = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, op, peer)
        site = self.sites.get(key)
        if site is None:
            with self._lock:
                if len(self.sites) >= self.max_sites:
                    key = OTHER
                site = self.sites.get(key)
                if site is None:
                    site = self.sites[key] = Site(*key)
        return site

    def _is_foreign(self, code: Any) -> bool:
        if "__tracebackhide__" in code.co_varnames:
            return False
        name = os.path.normcase(code.co_filename)
        return not name.startswith(self.skip_prefixes)

    def peer_of(self, group: Any, group_rank: int, to_global: Callable[[Any, int], int]) -> int | None:
        key = (id(group), group_rank)
        if key not in self._peers:
            try:
                self._peers[key] = int(to_global(group, group_rank))
            except (RuntimeError, ValueError, TypeError):
                self._peers[key] = group_rank if len(self._peers) < 4096 else None
        return self._peers[key]

    # -- what the probe reads ---------------------------------------------------------

    def counts(self) -> dict[str, int]:
        with self._lock:
            self._flush()
            return {
                "created": self.created,
                "waited": self.waited,
                "completed": self.completed,
                "dropped": self.dropped,
                "live": self.live,
            }

    def top_sites(self, n: int = SITES_REPORTED) -> list[dict[str, Any]]:
        """The sites with the most live Works (then the most created), largest first."""
        with self._lock:
            ranked = sorted(self.sites.values(), key=lambda s: (-s.live, -s.live_max, -s.created, s.file, s.line))
            return [s.to_json() for s in ranked[:n]]


def _ref_of(work: object) -> _WorkRef | None:
    for ref in weakref.getweakrefs(work):
        if type(ref) is _WorkRef:
            return ref
    return None


def _nbytes(tensors: Any) -> int:
    try:
        return sum(int(t.nbytes) for t in tensors)
    except (TypeError, AttributeError):
        return 0


def install(table: WorkTable, process_group: type, work: type, to_global: Callable[[Any, int], int]) -> list[str]:
    """Patch `process_group`'s Work-returning methods and `work`'s waits to report to
    `table`; returns the methods patched. Patching twice is refused (once per process)."""
    if getattr(process_group, "__hicache_traced__", False):
        return []
    patched = []
    for name in WORK_METHODS:
        original = process_group.__dict__.get(name)
        if original is None:
            continue
        setattr(process_group, name, _creating(table, name, original, to_global))
        patched.append(name)
    for name in WAIT_METHODS:
        original = work.__dict__.get(name)
        if original is not None:
            setattr(work, name, _waiting(table, original))
    original_poll = work.__dict__.get("is_completed")
    if original_poll is not None:
        work.is_completed = _polling(table, original_poll)
    process_group.__hicache_traced__ = True
    return patched


def _creating(table: WorkTable, name: str, original: Callable[..., Any], to_global: Callable[[Any, int], int]):  # noqa: ANN202
    point_to_point = name in SEND_METHODS or name in RECV_METHODS

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        work = original(self, *args, **kwargs)
        if work is not None:
            peer, nbytes = None, 0
            if point_to_point and len(args) >= 2 and isinstance(args[1], int):
                peer = table.peer_of(self, args[1], to_global)
                nbytes = _nbytes(args[0])
            table.created_work(work, name, peer, sys._getframe(1), nbytes)
        return work

    method.__name__ = name
    method.__qualname__ = f"ProcessGroup.{name}"
    method.__doc__ = original.__doc__
    return method


def _waiting(table: WorkTable, original: Callable[..., Any]):  # noqa: ANN202
    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        ref = _ref_of(self)
        if ref is not None:
            site = ref.site
            table.blocked_on = f"wait on {site.op}{'' if site.peer is None else f' with rank {site.peer}'}"
        try:
            result = original(self, *args, **kwargs)
        finally:
            table.blocked_on = None
        table.waited_work(self)
        return result

    wait.__name__ = original.__name__
    wait.__doc__ = original.__doc__
    return wait


def _polling(table: WorkTable, original: Callable[..., Any]):  # noqa: ANN202
    def is_completed(self: Any) -> Any:
        done = original(self)
        if done:
            table.seen_complete(self)
        return done

    is_completed.__doc__ = original.__doc__
    return is_completed
