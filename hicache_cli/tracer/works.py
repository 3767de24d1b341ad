"""Every Work torch.distributed hands out, counted by where it was created.

The hooks sit on the C++ classes, not on the Python functions: each ProcessGroup method
that returns a Work (send, recv, allreduce, ...), and Work.wait. So `dist.isend`,
`batch_isend_irecv` (whose P2POp insists that its op *is* `dist.isend`), async
collectives and direct `group.send` calls are all seen, whatever names the program
imported them under, and nothing the program holds is replaced.

A Work is *live* from its creation until it is waited or the program drops its last
reference to it. Point-to-point messages, blocking ones included, are counted per peer as
they pass `send` and `recv` (messages.py). The table holds one weak reference per live Work
(never the Work) and at most MAX_SITES sites; the rest are pooled in one "other sites" entry.

Stdlib only; the classes to patch are passed in, so the table is tested with fakes.
"""

from __future__ import annotations

import dis
import linecache
import os
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hicache_cli.tracer.hazards import BlockingCall
from hicache_cli.tracer.messages import PeerMessages, counting, nbytes

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
POINT_TO_POINT = ("send", "recv")  # (tensors, peer, tag): the peer is known
# torch.distributed functions that always hand their Work to the caller (collectives do
# when called with async_op=True; send, recv and the rest wait it themselves)
HANDED = frozenset({"isend", "irecv", "batch_isend_irecv"})
_FOREIGN, _TORCH = object(), object()
CO_VARARGS, CO_VARKEYWORDS = 0x04, 0x08
WAIT_METHODS = ("wait", "synchronize")
MAX_SITES = 256
SITES_REPORTED = 20
SOURCE_CHARS = 200  # a site's source line, as reported, at most
OTHER = ("(other sites)", 0, "", "", None)
SENDS = frozenset({"send", "isend", "batch_isend_irecv(isend)"})
RECVS = frozenset({"recv", "irecv", "recv_anysource", "batch_isend_irecv(irecv)"})


@dataclass(eq=False, slots=True)  # slots: its counts are updated on every Work
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
    live_max: int = 0  # the most live at once: a leak released at exit still shows here
    bytes_per_work: int = 0  # tensor bytes the first Work made here carried (send/recv)
    backend: str | None = None  # the process group's backend (send/recv: `gloo`), read once
    polled: tuple[str, int, str] | None = None  # where the program first asked is_completed() of one
    _source: str | None = None  # the line's text, read once (linecache) when first reported

    @property
    def live(self) -> int:
        return self.created - self.waited - self.dropped

    @property
    def source(self) -> str | None:
        """The site's line of source, stripped and cut to SOURCE_CHARS; None when the file
        cannot be read (a pooled or internal site, code compiled from a string)."""
        if self._source is None:
            self._source = linecache.getline(self.file, self.line).strip()[:SOURCE_CHARS] if self.line > 0 else ""
        return self._source or None

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
            "live_bytes": self.live * self.bytes_per_work,
            "source": self.source,
            "backend": self.backend,
            "polled": None
            if self.polled is None
            else dict(zip(("file", "line", "function"), self.polled, strict=True)),
        }


@dataclass(frozen=True)
class Totals:
    """A process's Works, summed over its sites when the probe reads them."""

    created: int = 0
    waited: int = 0
    completed: int = 0
    dropped: int = 0
    live_bytes: int = 0
    sent: int = 0  # point-to-point messages sent (blocking or not: every ProcessGroup.send)
    received: int = 0  # ... and receives posted
    ops: int = 0  # every Work a ProcessGroup method returned, those torch waits itself included

    @property
    def live(self) -> int:
        return self.created - self.waited - self.dropped

    def counts(self) -> dict[str, int]:
        return {
            "created": self.created,
            "waited": self.waited,
            "completed": self.completed,
            "dropped": self.dropped,
            "live": self.live,
            "ops": self.ops,
        }


class _WorkRef(weakref.ref):
    """The table's only hold on a Work: weak, with the site it was made at and the Work's
    id, its key in the table. (No Python __init__: the slots are set after creation, which
    keeps a Work's cost down.)"""

    __slots__ = ("site", "seen_complete", "key")
    site: Site
    seen_complete: bool
    key: int


class Forwarding(frozenset):
    """A decorator's wrapper (typing_extensions' and warnings' `@deprecated`, a
    functools.wraps wrapper, contextlib's ContextDecorator, a program's own): the offsets
    of the calls at which its code hands on its own `*args` and `**kwargs`. A frame stopped
    at one of them is only passing the call through, so the line that made the Work is its
    caller's; stopped elsewhere (a Work the wrapper makes itself), the wrapper's own."""

    __slots__ = ()


def forwarding(code: Any) -> Forwarding | None:
    """The forwarding calls of `code`, when it takes `*args, **kwargs` and passes both on
    in one call (`return fn(*args, **kwargs)`, `fn(self, *args, **kwargs)`); None for any
    other code. Read from its bytecode, once per code object: what the frame is, not what
    its module is called."""
    if code.co_flags & (CO_VARARGS | CO_VARKEYWORDS) != CO_VARARGS | CO_VARKEYWORDS:
        return None
    first = code.co_argcount + code.co_kwonlyargcount
    passed = {code.co_varnames[first], code.co_varnames[first + 1]}
    loaded: set[str] = set()
    calls = []
    for instruction in dis.get_instructions(code):
        if instruction.opname.startswith("LOAD_FAST"):  # (3.13+: LOAD_FAST_LOAD_FAST loads a pair)
            value = instruction.argval
            loaded.update(value if isinstance(value, tuple) else (value,))
        elif instruction.opname == "CALL_FUNCTION_EX":
            if passed <= loaded:
                calls.append(instruction.offset)
            loaded.clear()
    return Forwarding(calls) if calls else None


class WorkTable:
    """Counts by site; `live` = created - waited - dropped.

    The hot path (a Work made, a Work waited) is kept to a few dozen bytecodes: counts live
    only on sites (totals are summed when read), and no lock is taken: dict operations are
    atomic under the GIL, and a weak-reference callback (which may run inside any
    allocation) only counts and queues its reference for removal. Works made at one site
    by two threads at the very same moment may miss a count.
    """

    def __init__(self, skip_prefixes: tuple[str, ...] = (), max_sites: int = MAX_SITES) -> None:
        self.skip_prefixes = tuple(os.path.normcase(p) for p in skip_prefixes)
        self.max_sites = max_sites
        self.messages = PeerMessages()
        self.sites: dict[tuple[Any, ...], Site] = {}
        # every Work-returning call, a blocking collective's too: whether the process still
        # makes progress (analysis/progress.py) when none of its Works reaches the program
        self.ops = 0
        self.waiting_on: Site | None = None  # the site of the Work the program waits on right now
        # the last send/recv torch waits itself, as the fields of a hazards.BlockingCall (a
        # plain tuple: one is made per blocking call), and the same while torch waits it
        self.blocking: tuple[Any, ...] | None = None
        self.waiting_blocking: tuple[Any, ...] | None = None
        # live Works by id(work); a dead Work's id can be reused before its reference is
        # flushed, so an entry is only ever removed by the reference it holds
        self._refs: dict[int, _WorkRef] = {}
        self._gone: deque[_WorkRef] = deque()
        self._new_site = threading.Lock()  # only when a site is added
        # id(code object) -> _FOREIGN, _TORCH or a c10d function's name. By id: hashing a code
        # object hashes its constants and names, 0.5 us a frame in torch's; every code object
        # seen is kept in _codes, so its id stays its own (and _places may use it too)
        self._kinds: dict[int, object] = {}
        self._codes: list[Any] = []
        self._async_ops: set[str] = set()  # c10d functions that hand out their Work when async_op=True
        self._peers: dict[tuple[int, int], int | None] = {}
        # (id(code), instruction offset, op, id(group), group peer) -> site
        self._places: dict[tuple[Any, ...], Site] = {}
        self._on_collect = self._collected  # one bound method for every weak reference
        # the program's polls of Works this table never counted (hicache attach: made before
        # it came): [file, line, function, polls, polls that answered True], from the first
        self.polled_before: list[Any] | None = None

    def reset(self) -> None:
        """Forget every Work and message (a forked child is a new process), emptying in
        place what the patched methods hold."""
        self.messages.clear()
        for held in (self.sites, self._refs, self._gone, self._peers, self._places):
            held.clear()
        self.ops = 0
        self.waiting_on = self.blocking = self.waiting_blocking = self.polled_before = None
        self._new_site = threading.Lock()  # (a lock held by another thread at the fork stays held)

    # -- the program's side ------------------------------------------------------------

    def created_work(self, work: object, method: str, frame: Any, sent: tuple[Any, ...] = ()) -> None:
        """A ProcessGroup `method` returned a Work. It is counted when the program gets it;
        one torch waits itself is not. For send and recv `sent` is (group, tensors, group
        peer, to_global): the peer and the bytes are worked out only for a Work counted."""
        self.ops += 1
        walked = self._walk(method, frame, work, sent)
        if walked is None:
            return
        call, frame = walked
        if frame is not None:  # found by place and peer: the global rank is worked out once a site
            place = (
                (id(frame.f_code), frame.f_lasti, call, id(sent[0]), sent[2])
                if sent
                else (id(frame.f_code), frame.f_lasti, call)
            )
            site = self._places.get(place)
        else:
            place = site = None
        if site is None:
            site = self._site(call, self.peer_of(sent[0], sent[2], sent[3]) if sent else None, frame, place)
        if sent and not site.created:
            site.bytes_per_work = nbytes(sent[1])
            site.backend = _backend(sent[0])
        try:
            ref = _WorkRef(work, self._on_collect)
        except TypeError:  # a Work type without weak references: counted as created and waited
            site.created += 1
            site.waited += 1
            return
        ref.site, ref.seen_complete, ref.key = site, False, id(work)
        if self._gone:
            self._flush()
        self._refs[ref.key] = ref
        site.created += 1
        live = site.created - site.waited - site.dropped
        if live > site.live_max:
            site.live_max = live

    def waited_work(self, ref: _WorkRef) -> None:
        if self._refs.get(ref.key) is not ref:
            return  # waited before: counted once
        del self._refs[ref.key]
        site = ref.site
        site.waited += 1
        if not ref.seen_complete:
            ref.seen_complete = True
            site.completed += 1

    def ref_of(self, work: object) -> _WorkRef | None:
        """The table's reference to a live Work; None for one not counted, or no longer live."""
        ref = self._refs.get(id(work))
        return ref if ref is not None and ref() is work else None

    def made_at(self, work: object) -> tuple[str, int, str] | None:
        """Where a live Work this table counted was made: (file, line, function)."""
        ref = self.ref_of(work)
        return None if ref is None else (ref.site.file, ref.site.line, ref.site.function)

    def seen_complete(self, work: object) -> None:
        ref = self.ref_of(work)
        if ref is not None and not ref.seen_complete:
            ref.seen_complete = True
            ref.site.completed += 1

    def polled_at(self, site: Site, frame: Any) -> None:
        """The program asked is_completed() of a Work made at `site`, from `frame` (noted
        once a site): the first frame of the program's own up the stack; a comprehension's
        or a generator's line is named by the function it runs in."""
        while frame is not None:
            kind = self._kinds.get(id(frame.f_code))
            if kind is None:
                kind = self._learn(frame.f_code)
            if kind is _FOREIGN:
                break
            frame = frame.f_back
        if frame is None:
            site.polled = ("(torch internals)", 0, "")
            return
        site.polled = _place(frame)

    def polled_unknown(self, done: bool, frame: Any) -> None:
        """The program itself (`frame` is its code, not torch's) asked is_completed() of a
        Work this table does not know: one made before hicache attached."""
        seen = self.polled_before
        if seen is None:
            kind = self._kinds.get(id(frame.f_code)) or self._learn(frame.f_code)
            if kind is not _FOREIGN:
                return  # torch asking about its own Works
            seen = self.polled_before = [*_place(frame), 0, 0]
        seen[3] += 1
        seen[4] += bool(done)

    def _collected(self, ref: _WorkRef) -> None:
        """The program let go of a Work it never waited (weakref callback: count, queue)."""
        if self._refs.get(ref.key) is ref:
            ref.site.dropped += 1
            self._gone.append(ref)

    def _flush(self) -> None:
        refs = self._refs
        while self._gone:
            ref = self._gone.popleft()
            if refs.get(ref.key) is ref:  # (a new Work with the same id keeps its entry)
                del refs[ref.key]

    # -- where a Work was created -----------------------------------------------------

    def _walk(self, op: str, frame: Any, work: object = None, sent: tuple[Any, ...] = ()) -> tuple[str, Any] | None:
        """(the op, the creation frame): the first frame outside torch, outside functions
        that hide themselves with a local `__tracebackhide__` (as pytest's helpers do), and
        outside a decorator's wrapper that is forwarding its call (`Forwarding`); the op
        is the torch.distributed function the program called, when there is one. None for a
        Work that function waits itself before returning (send, recv, a collective without
        async_op, torch's own helpers): it never reaches the program, so it can never be kept;
        a send or recv so is noted as `blocking` (where the program is, should it hang there)."""
        kinds = self._kinds
        inner = outer = outer_frame = None
        while frame is not None:
            kind = kinds.get(id(frame.f_code))
            if kind is None:
                kind = self._learn(frame.f_code)
            if kind is _FOREIGN:
                break
            if kind is not _TORCH:
                if kind.__class__ is Forwarding:  # a decorator's wrapper: walked through at its forwarding call
                    if frame.f_lasti not in kind:
                        break
                else:  # a public torch.distributed function, by name
                    if inner is None:
                        inner = kind
                    outer, outer_frame = kind, frame
            frame = frame.f_back
        if outer is not None:
            if outer not in HANDED and not (outer in self._async_ops and outer_frame.f_locals.get("async_op")):
                if sent and frame is not None:  # (never the frame: it would keep the program's locals alive)
                    self.blocking = (id(work), outer, sent[0], sent[2], sent[3], frame.f_code, frame.f_lasti)
                return None
            op = f"{outer}({inner})" if outer == "batch_isend_irecv" else outer  # a batch's isend/irecv
        return op, frame

    def _site(self, op: str, peer: int | None, frame: Any, place: tuple[Any, ...] | None) -> Site:
        """The site of a creation frame not seen at this place before (working out a line
        number scans the code's line table: done once per place)."""
        if frame is None:
            return self._site_by_key(("(torch internals)", 0, "", op, peer))
        code = frame.f_code
        site = self._site_by_key((code.co_filename, frame.f_lineno, code.co_name, op, peer))
        if place is not None and len(self._places) < 4 * self.max_sites:
            self._places[place] = site
        return site

    def _site_by_key(self, key: tuple[Any, ...]) -> Site:
        site = self.sites.get(key)
        if site is None:
            with self._new_site:
                if len(self.sites) >= self.max_sites:
                    key = OTHER
                site = self.sites.get(key)
                if site is None:
                    site = self.sites[key] = Site(*key)
        return site

    def _learn(self, code: Any) -> object:
        """The kind of a code object not walked before, noted (and the code kept) for next time."""
        kind = self._kinds[id(code)] = self._kind(code)
        self._codes.append(code)
        return kind

    def _kind(self, code: Any) -> object:
        """_FOREIGN (the program's), _TORCH, or the name of a public torch.distributed
        function (for those taking async_op, noted as such). Computed once per code object."""
        if "__tracebackhide__" in code.co_varnames:
            return _TORCH
        if not os.path.normcase(code.co_filename).startswith(self.skip_prefixes):
            return forwarding(code) or _FOREIGN
        if code.co_filename.endswith("distributed_c10d.py") and not code.co_name.startswith("_"):
            if "async_op" in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]:
                self._async_ops.add(code.co_name)
            return sys.intern(code.co_name)
        return _TORCH

    def peer_of(self, group: Any, group_rank: int, to_global: Callable[[Any, int], int]) -> int | None:
        key = (id(group), group_rank)
        peer = self._peers.get(key, -1)
        if peer != -1:
            return peer
        try:
            peer = int(to_global(group, group_rank))
        except (RuntimeError, ValueError, TypeError):
            peer = group_rank
        if len(self._peers) < 4096:
            self._peers[key] = peer
        return peer

    # -- what the probe reads ---------------------------------------------------------

    def totals(self) -> Totals:
        if self._gone:
            self._flush()
        created = waited = completed = dropped = live_bytes = 0
        for site in list(self.sites.values()):
            created += site.created
            waited += site.waited
            completed += site.completed
            dropped += site.dropped
            live_bytes += site.live * site.bytes_per_work
        sent, received = self.messages.totals()
        return Totals(created, waited, completed, dropped, live_bytes, sent, received, self.ops)

    def counts(self) -> dict[str, int]:
        return self.totals().counts()

    def forget(self) -> None:
        """Drop every weak reference (hicache attach, detaching): a Work the program still
        holds then carries no callback into this table, so nothing keeps the table alive."""
        self._refs.clear()
        self._gone.clear()
        self._places.clear()
        self._kinds.clear()
        self._codes.clear()
        self._peers.clear()
        self.waiting_on = self.blocking = self.waiting_blocking = None  # (a blocking call holds its group)

    @property
    def blocked_on(self) -> str | None:
        """What the program waits on right now, in words (read by the probe, not per wait)."""
        site, blocking = self.waiting_on, self.waiting_blocking
        if site is None:
            return None if blocking is None else BlockingCall(*blocking).text(self.blocked_peer)
        return f"wait on {site.op}{'' if site.peer is None else f' with rank {site.peer}'} ({site.file}:{site.line})"

    @property
    def blocked_peer(self) -> int | None:
        """The global rank the program waits on right now, when it is one peer."""
        site, blocking = self.waiting_on, self.waiting_blocking
        if site is not None:
            return site.peer
        if blocking is None:
            return None
        call = BlockingCall(*blocking)
        return self.peer_of(call.group, call.group_peer, call.to_global)

    def top_sites(self, n: int = SITES_REPORTED) -> list[dict[str, Any]]:
        """The sites with the most live Works (then the most created), largest first."""
        ranked = sorted(list(self.sites.values()), key=lambda s: (-s.live, -s.live_max, -s.created, s.file, s.line))
        return [s.to_json() for s in ranked[:n]]


def install(table: WorkTable, process_group: type, work: type, to_global: Callable[[Any, int], int]) -> list[str]:
    """Patch `process_group`'s Work-returning methods and `work`'s waits to report to
    `table`; returns the methods patched. Patching twice is refused (once per process)."""
    if "__hicache_originals__" in process_group.__dict__:
        return []
    originals: list[tuple[type, str, Any]] = []
    patched = []
    table.messages.to_global = to_global
    for name in WORK_METHODS:
        original = process_group.__dict__.get(name)
        if original is None:
            continue
        originals.append((process_group, name, original))
        if name in POINT_TO_POINT:  # every message, counted per peer (messages.py)
            wrapped = counting(table.messages, name, original, table.created_work, to_global)
        else:
            wrapped = _creating(table, name, original)
        setattr(process_group, name, wrapped)
        patched.append(name)
    for name, wrap in (*((n, _waiting) for n in WAIT_METHODS), ("is_completed", _polling)):
        original = work.__dict__.get(name)
        if original is not None:
            originals.append((work, name, original))
            setattr(work, name, wrap(table, original))
    process_group.__hicache_originals__ = originals
    return patched


def uninstall(process_group: type) -> None:
    """Put back what `install` replaced (the trace-cost benchmark switches the tracer off;
    hicache attach detaches)."""
    for owner, name, original in process_group.__dict__.get("__hicache_originals__", []):
        setattr(owner, name, original)
    if "__hicache_originals__" in process_group.__dict__:
        delattr(process_group, "__hicache_originals__")


def _place(frame: Any) -> tuple[str, int, str]:
    """(file, line, function) of a program's frame; a comprehension's or generator's line is
    named by the function it runs in (`ship`, not `<listcomp>`)."""
    code, line = frame.f_code, frame.f_lineno
    function = code.co_name
    outer = frame.f_back
    while function.startswith("<") and outer is not None and outer.f_code.co_filename == code.co_filename:
        function, outer = outer.f_code.co_name, outer.f_back
    return code.co_filename, line, function


def _backend(group: Any) -> str | None:
    """A process group's backend by name (`gloo`, `nccl`); None when it cannot say."""
    try:
        name = group.name()
    except Exception:  # noqa: BLE001 - a group of another kind (a fake, a wrapper): unknown
        return None
    return name if isinstance(name, str) else None


def _creating(table: WorkTable, name: str, original: Callable[..., Any]):  # noqa: ANN202
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        work = original(self, *args, **kwargs)
        if work is not None:
            table.created_work(work, name, sys._getframe(1))
        return work

    method.__name__ = name
    method.__qualname__ = f"ProcessGroup.{name}"
    method.__doc__ = original.__doc__
    return method


def _waiting(table: WorkTable, original: Callable[..., Any]):  # noqa: ANN202
    refs = table._refs

    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        ref = refs.get(id(self))
        if ref is None or ref() is not self:  # a Work torch waits itself, or one waited before
            blocking = table.blocking
            if blocking is None or blocking[0] != id(self):
                return original(self, *args, **kwargs)
            table.waiting_blocking = blocking  # a blocking send/recv: named while it waits
            try:
                return original(self, *args, **kwargs)
            finally:
                table.waiting_blocking = None
        table.waiting_on = ref.site
        try:
            result = original(self, *args, **kwargs)
        finally:
            table.waiting_on = None
        table.waited_work(ref)
        return result

    wait.__name__ = original.__name__
    wait.__doc__ = original.__doc__
    return wait


def _polling(table: WorkTable, original: Callable[..., Any]):  # noqa: ANN202
    refs = table._refs

    def is_completed(self: Any) -> Any:
        done = original(self)
        ref = refs.get(id(self))
        if ref is None:
            table.polled_unknown(done, sys._getframe(1))
        elif (done or ref.site.polled is None) and ref() is self:
            if ref.site.polled is None:
                table.polled_at(ref.site, sys._getframe(1))
            if done and not ref.seen_complete:
                ref.seen_complete = True
                ref.site.completed += 1
        return done

    is_completed.__doc__ = original.__doc__
    return is_completed
