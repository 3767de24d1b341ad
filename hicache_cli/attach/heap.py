"""Every object the collector tracks, gc.freeze()'s included, taken a few milliseconds at a time.

`gc.get_objects()` falls short of a census twice:

- It lists the collector's three generations, not the permanent one that `gc.freeze()`
  moves every tracked object into. Serving processes freeze their heap once warm (SGLang's
  scheduler on `/freeze_gc`, vLLM's engine at start-up, to spare their loops the collector's
  full passes): a work list made before the freeze is then invisible to it, and a census of
  a frozen scheduler that leaks counted no Work at all.
- It is one hold of the GIL: about 80-90 ns an object of a real heap (22 ms at 0.285 M
  objects, ~0.25 s at 3 M), past the 50 ms a follow may pause the program.

So, where the interpreter is one whose layout this module knows (CPython 3.10-3.13 with the
GIL, 64-bit), the lists themselves are walked. Each generation is a circular doubly linked
list through the two-word header (PyGC_Head) before each tracked object; the four list
heads lie in the interpreter's collector state (`generations[3]`, a pointer to the first,
`permanent_generation`). Generation 0's head is read off its first object's back link, and
the layout is accepted only when facts that cannot match by chance do: the pointer beside
the heads points at generation 0's head, the oldest generation's count of collections is
gc.get_stats()'s, and the words after them hold `gc.garbage` and `gc.callbacks`.

A chunk of a list is taken in **one C call**: ctypes views follow the links
(`accumulate(getattr)` over `next`/`contents`), stop at any list head, write each object's
address into a buffer, and a `py_object` view of that buffer takes a reference to each.
No Python bytecode runs from reading a link to holding the object it leads to, so no other
thread can run and free that object in between (a Python loop would give the GIL away
between any two of its calls). The collector is off around the call (before 3.12 allocating
a view may run it then and there, and its finalizers are bytecode), and a chunk is not
taken while another thread's collection is under way. Between chunks the walk sleeps (the
program runs on); the last object taken, held, is where the next chunk starts. A full
collection, a freeze or an unfreeze meanwhile (told by the collection count and by the
frozen list's last object) can move it to another list or reorder its own: the walk then
starts that list again, at most RETRIES times; then the three generations are taken by
one gc.get_objects() after all (a long hold, rather than a census blind to them).

The three generations are taken whole by one `gc.get_objects()` while the collector's own
count of the oldest (objects that survived its last full pass, and those promoted since) is
under WHOLE_BELOW. Past it the oldest is walked, and the two young ones (hundreds to
thousands of objects) are taken whole in the same hold as its last chunk, the collector
off, so that an object it promotes meanwhile is seen once; less the walk's own lists and
records. The frozen generation is walked after them. The snapshot's list is untracked by the
collector (`untracked`), so that no collection while the census runs traverses it.

Elsewhere (3.14's incremental collector, free-threaded builds, other implementations) the
census falls back to `gc.get_objects()` and says how many frozen objects it did not see.

Stdlib only: it runs inside the target.
"""

from __future__ import annotations

import gc
import sys
import time
from ctypes import Structure, _Pointer, addressof, c_int, c_size_t, c_ssize_t, py_object
from dataclasses import dataclass
from functools import partial
from itertools import accumulate, chain, compress, count, cycle, islice, repeat, takewhile, tee
from operator import add, contains, is_not, not_, setitem
from typing import Any, Protocol

GC_HEAD = 16  # sizeof(PyGC_Head): the two links before every tracked object
GENERATION = 24  # sizeof(struct gc_generation): a list head, then threshold and count
STATS = 24  # sizeof(struct gc_generation_stats): collections, collected, uncollectable
WHOLE_BELOW = 250_000  # oldest generation smaller: one gc.get_objects() (~20-25 ms at 80-90 ns an object)
MAX_CHUNK = 50_000  # objects one chunk may take (the buffer's size)
RETRIES = 3  # a list started again this many times (a full collection meanwhile, each time): taken otherwise


class Pace(Protocol):
    """Who takes the holds: the census's walker, which accounts for them and sleeps between."""

    chunk_s: float

    def hold(self) -> float: ...
    def rest(self, held_since: float) -> None: ...
    def out_of_time(self) -> bool: ...


@dataclass
class Heap:
    """The objects, and what the census should say about how they were taken."""

    objects: list[Any]
    frozen: int = 0  # of them, in gc.freeze()'s permanent generation
    unseen: str = ""  # why tracked objects were left out, when some were
    partial: bool = False  # the frozen objects moved under the walk every try: some are left out


def _word(address: int) -> int:
    return c_size_t.from_address(address).value


def _aligned(address: int) -> int:
    return (address + 7) & ~7


def _layout_known() -> bool:
    return (
        sys.implementation.name == "cpython"
        and (3, 10) <= sys.version_info[:2] <= (3, 13)
        and sys.maxsize == 2**63 - 1
        # a free-threaded build ("t") keeps no lists; a debug build's ("d") object header is longer
        # (read off sys, not sysconfig: importing that into the program parses its build data)
        and not set(getattr(sys, "abiflags", "")) & {"t", "d"}
        and not hasattr(sys, "gettotalrefcount")
    )


class Lists:
    """The collector's four lists in this process, found and checked (`find`)."""

    def __init__(self, head0: int, permanent: int, stats: int, garbage: int) -> None:
        self.heads = (head0, head0 + GENERATION, head0 + 2 * GENERATION)
        self.permanent = permanent
        self.stops = frozenset((*self.heads, permanent))
        self.stats, self.collecting_flag, self.long_lived = stats, stats + 3 * STATS, garbage + 16
        # the pointer type is made here, not by ctypes.POINTER(), which would keep it (and
        # this module's class) in ctypes' cache after the agent has gone
        link = type("Link", (Structure,), {})
        link_pointer = type(_Pointer)("LinkPointer", (_Pointer,), {"_type_": link})
        link._fields_ = [("next", link_pointer), ("prev", c_size_t)]
        self.link = link
        self.buffer = (c_size_t * (MAX_CHUNK + 1))()
        self.refs = (py_object * (MAX_CHUNK + 1)).from_buffer(self.buffer)
        self.nones = [id(None)] * (MAX_CHUNK + 1)

    @classmethod
    def find(cls) -> Lists | None:
        """The lists, where the struct around them is the one known. Its fields are placed
        by their C alignment: a list head is 8-aligned on 3.10-3.12, 4-aligned on 3.13
        (PyGC_Head is declared so), which moves every field after the heads."""
        if not _layout_known():
            return None
        anchor = [[]]  # generation 0 holds at least this
        first = gc.get_objects(generation=0)[0]
        head0 = _word(id(first) - GC_HEAD + 8) & ~3  # its back link, less the collector's flag bits
        del anchor, first
        pointer = _aligned(head0 + 3 * GENERATION)  # PyGC_Head *generation0
        permanent = pointer + 8
        stats = _aligned(permanent + GENERATION)
        garbage = _aligned(stats + 3 * STATS + 4)  # after int collecting
        if _word(pointer) != head0 or _word(garbage) != id(gc.garbage) or _word(garbage + 8) != id(gc.callbacks):
            return None
        if c_ssize_t.from_address(stats + 2 * STATS).value != gc.get_stats()[2]["collections"]:
            return None
        return cls(head0, permanent, stats, garbage)

    def collections(self, generation: int) -> int:
        return c_ssize_t.from_address(self.stats + STATS * generation).value

    def collecting(self) -> bool:
        return c_int.from_address(self.collecting_flag).value != 0

    def old_objects(self) -> int:
        """The collector's own count of its oldest generation: survivors of its last full
        pass, and objects promoted since (those that died meanwhile still counted)."""
        total, pending = (c_ssize_t.from_address(self.long_lived + 8 * i).value for i in (0, 1))
        return max(0, total) + max(0, pending)

    def after(self, start: int, n: int) -> list[Any]:
        """The objects linked after the header at `start`, the next n up to the first list
        head: one C call, from reading the first link to holding the last object."""
        self.buffer[: n + 1] = self.nones[: n + 1]
        nodes = islice(
            accumulate(cycle(("next", "contents")), getattr, initial=self.link.from_address(start)), 2, 2 * n + 1, 2
        )
        here, there = tee(map(addressof, nodes))
        linked = compress(there, takewhile(bool, map(not_, map(partial(contains, self.stops), here))))
        written = filter(None, map(setitem, repeat(self.buffer), count(), map(add, linked, repeat(GC_HEAD))))
        return list(chain(written, takewhile(partial(is_not, None), self.refs)))

    def next_at(self, node: int) -> int:
        """Where the link at `node` (a list head, or a live object's header) leads."""
        return _word(node) & ~1

    def next_of(self, obj: Any) -> int:
        return self.next_at(id(obj) - GC_HEAD)

    def frozen_tail(self) -> int:
        """The last frozen object's header: another after a gc.freeze() or gc.unfreeze()."""
        return _word(self.permanent + 8) & ~3


def every_object(pace: Pace, lists: Lists | None = None) -> Heap:
    """Every tracked object, frozen ones included where the lists can be walked, in a list
    the collector does not track (`untracked`)."""
    lists = lists if lists is not None else Lists.find()
    if lists is None or lists.old_objects() < WHOLE_BELOW:
        held_since = pace.hold()
        heap = Heap(untracked(gc.get_objects()))  # the three generations, in one hold of ~20 ms at most
        frozen = gc.get_freeze_count() if lists is None else 0
        pace.rest(held_since)
        if frozen:
            heap.unseen = (
                f"{frozen:,} objects the program froze with gc.freeze(): gc.get_objects() leaves them out and this"
                " Python's collector lists are not ones hicache can walk, so Works they hold are not counted"
            )
    else:
        objects = untracked([])
        if _Walk(lists, pace, objects).list(lists.heads[2], young=True) is None and not pace.out_of_time():
            held_since = pace.hold()  # full collections kept reordering it: one long hold, not a blind census
            objects = untracked(gc.get_objects())
            pace.rest(held_since)
        heap = Heap(objects)  # (made after: a record among the objects that refers to
        # their list would be a cycle through an untracked list, which no collection ever frees)
    if lists is not None and not pace.out_of_time():
        frozen = _Walk(lists, pace, heap.objects).list(lists.permanent)
        heap.frozen, heap.partial = frozen or 0, frozen is None
    return heap


def untracked(objects: list[Any]) -> list[Any]:
    """The list, untracked by the collector (PyObject_GC_UnTrack): it still holds its objects,
    but no collection traverses it. A census's snapshot tracked would be traversed whole, 2 M
    objects, by each collection of its generation while the census runs (60-90 ms measured,
    in whichever thread allocated), and could be walked into itself."""
    if sys.implementation.name == "cpython":
        from ctypes import PYFUNCTYPE, pythonapi

        PYFUNCTYPE(None, py_object)(("PyObject_GC_UnTrack", pythonapi))(objects)
    return objects


def sees_frozen() -> bool:
    """Whether a census on this Python finds what gc.freeze() froze: a list frozen here,
    and only here, is among every_object()'s (`hicache doctor`; the freeze undone after)."""
    if gc.get_freeze_count():  # the caller froze objects of its own: leave them be
        return Lists.find() is not None
    marker = [["frozen"]]
    gc.freeze()
    try:
        return any(obj is marker for obj in every_object(_NoRest()).objects)
    finally:
        gc.unfreeze()


class _NoRest:
    """A Pace for a walk outside a census: holds one after another, none accounted."""

    chunk_s = 0.004

    def hold(self) -> float:
        return 0.0

    def rest(self, held_since: float) -> None:
        pass

    def out_of_time(self) -> bool:
        return False


class _Walk:
    """Lists walked a chunk a hold, onto `objects` (untracked: never met on a list)."""

    def __init__(self, lists: Lists, pace: Pace, objects: list[Any]) -> None:
        self.lists, self.pace, self.objects = lists, pace, objects
        self.size = 1024  # objects the next chunk takes: sized to take about pace.chunk_s

    def list(self, head: int, young: bool = False) -> int | None:
        """Walk the list at `head` to its end; with `young`, take the two young generations
        with its last chunk. How many objects it added; None when it could not be walked
        whole (moved or reordered under the walk every time, or out of time)."""
        objects = self.objects
        for _ in range(RETRIES):
            began = len(objects)
            if self._walk(head, young):
                return len(objects) - began
            del objects[began:]
            if self.pace.out_of_time():
                break
        return None

    def _walk(self, head: int, young: bool) -> bool:
        lists, pace = self.lists, self.pace
        full = lists.collections(2) if head != lists.permanent else None  # (no collection touches that one)
        frozen = lists.frozen_tail()
        cursor: Any = None  # the last object taken, held: the next chunk starts after it
        while not pace.out_of_time():
            held_since = pace.hold()
            try:
                if lists.collecting():  # another thread's collection, paused in a finalizer
                    continue
                if full is not None and lists.collections(2) != full:  # a full pass reorders the list it walks
                    return False
                if lists.frozen_tail() != frozen:  # a freeze or an unfreeze moved whole lists: the walk could
                    return False  # follow its object from one to another and back, and not end
                if cursor is not None and not gc.is_tracked(cursor):
                    return False
                with _CollectorOff():  # nor other threads' between the statements below
                    moved = lists.collections(1)
                    taken = self._chunk(head if cursor is None else id(cursor) - GC_HEAD)
                    cursor = taken[-1] if taken else cursor
                    end = lists.next_at(head) if cursor is None else lists.next_of(cursor)
                    if end == head and young:
                        taken += self._young(taken)
                        if lists.collections(1) != moved:  # the program's own gc.collect() in between
                            return False
                self.objects += taken
                if end == head:
                    return True
                if end in lists.stops:
                    return False  # it went onto another list (gc.freeze(), gc.unfreeze())
            except ValueError:  # a link read as NULL: the object left the lists under the walk
                return False
            finally:
                pace.rest(held_since)
        return False

    def _chunk(self, start: int) -> list[Any]:
        n = self.size
        began = time.perf_counter()
        taken = self.lists.after(start, n)
        elapsed = time.perf_counter() - began
        self.size = max(256, min(MAX_CHUNK, 2 * n, int(n * self.pace.chunk_s / max(elapsed, 1e-5))))
        return taken

    def _young(self, taken: list[Any]) -> list[Any]:
        """Generations 1 and 0 (a few thousand objects), less this walk's own lists and
        records: some refer to the snapshot, which would then hold itself in a cycle through
        an untracked list, every object kept alive for good."""
        older = gc.get_objects(generation=1)
        newer = gc.get_objects(generation=0)
        own, young = {id(taken), id(older)}, []
        for obj in chain(older, newer):  # (no comprehension: its closure cell would be among them)
            if id(obj) not in own and type(obj).__module__ != __name__:
                young.append(obj)
        return young


class _CollectorOff:
    """No collection while a chunk is taken: before 3.12 allocating a ctypes view may run
    one then and there, and its finalizers could give the GIL away mid-chunk; and the
    young generations are taken with the last chunk only if nothing promoted objects between."""

    def __enter__(self) -> None:
        self.was = gc.isenabled()
        if self.was:
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.was:
            gc.enable()
