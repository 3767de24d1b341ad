"""Walking every object of a live process without stopping it for long.

The census needs two kinds of sweep over the objects the garbage collector tracks: which
of them hold Works, and which of them refer to given containers. Each sweep goes through
one snapshot of them (heap.py: the frozen ones included, itself taken in chunks on a big
heap) in chunks: a chunk is examined with C-speed calls
(`gc.get_referents` over the whole chunk, then `map`/`set` over what it refers to), and
only a chunk that hits is looked at object by object. Between chunks the walk sleeps, which
releases the GIL, so the program runs on: each hold is a few milliseconds, and the walk
takes at most about half of the process's Python time while it runs.

Stdlib only: it runs inside the target.
"""

from __future__ import annotations

import collections
import gc
import time
from collections.abc import Callable, Iterator
from itertools import compress, filterfalse, islice
from typing import Any

from hicache_cli.attach.heap import every_object
from hicache_cli.attach.protocol import CensusCost

# The garbage collector untracks dicts and tuples that hold only untracked objects, and a
# Work (a pybind11 object) is untracked: `{rank: work}` or `(work, 3)` is invisible to
# gc.get_objects(). Such containers are found through the tracked objects that hold them.
UNTRACKED_KINDS = frozenset({dict, tuple})
SIZED = frozenset({list, tuple, dict, set, frozenset, collections.deque})
BIG = 20_000  # items: a container larger than this is swept a slice at a time
Hits = Callable[[list[Any], list[Any]], bool]  # (chunk, its referents) -> whether any object in it matters
VisitPart = Callable[[Any, list[Any]], None]  # (a big container, a slice of its items)
NARROW_TO = 16  # a chunk that hits is halved until it is this small, then visited object by object
FIRST_CHUNK = 256  # objects in a sweep's first chunk
NESTING = 3  # untracked tuples inside untracked tuples: how deep they are looked into


class Walker:
    """Chunked sweeps over one snapshot, with their cost recorded in `cost`."""

    def __init__(self, chunk_s: float = 0.004, rest_s: float = 0.004, budget_s: float = 60.0) -> None:
        self.chunk_s = chunk_s
        self.rest_s = rest_s
        self.clock = time.perf_counter
        self.cost = CensusCost()
        self._hold_cpu = 0.0
        self.deadline = self.clock() + budget_s
        heap = every_object(self)  # in holds of about chunk_s where they are many (heap.py)
        self.objects: list[Any] = heap.objects
        cost = self.cost
        cost.objects, cost.frozen, cost.unseen = len(self.objects), heap.frozen, heap.unseen
        cost.snapshot_s, cost.busy_s = cost.busy_s, 0.0
        cost.truncated = cost.truncated or heap.partial

    def release(self) -> None:
        self.objects = []

    def out_of_time(self) -> bool:
        if self.clock() >= self.deadline:
            self.cost.truncated = True
        return self.cost.truncated

    def hold(self) -> float:
        """A hold of the GIL begins (the walk examines objects until `rest`): when."""
        self._hold_cpu = time.thread_time()
        return self.clock()

    def rest(self, held_since: float) -> None:
        """End a hold of the GIL: account for it, then sleep (the program runs meanwhile)."""
        held = self.clock() - held_since
        self.cost.busy_s += held
        self.cost.max_hold_s = max(self.cost.max_hold_s, held)
        # a hold can outlast its CPU: the OS may run another process meanwhile, the GIL still held
        self.cost.max_hold_cpu_s = max(self.cost.max_hold_cpu_s, time.thread_time() - self._hold_cpu)
        self.cost.chunks += 1
        time.sleep(self.rest_s)

    def sweep(self, chunk_hits: Hits, visit: Callable[[Any], None], visit_part: VisitPart | None = None) -> None:
        """For each chunk of the snapshot: `chunk_hits(chunk, its referents)` says (fast)
        whether any object in it matters; if so `visit(obj)` is called on each of them. A
        container of more than BIG items is visited whole, in one hold; or, given
        `visit_part(container, items)`, a slice of its items (its referents) a hold."""
        # each sweep starts small: sweeps differ in what an object costs (a re-find looks
        # two levels down), so one sweep's chunk size could hold the GIL far too long in the next
        objects, size, start = self.objects, FIRST_CHUNK, 0
        began = self.clock()
        self.cost.passes += 1
        while start < len(objects) and not self.out_of_time():
            held_since = self.hold()
            chunk = objects[start : start + size]
            start += size
            chunk, big = _without_big(chunk)
            if chunk_hits(chunk, gc.get_referents(*chunk)):
                self._narrow(chunk, chunk_hits, visit)
            elapsed = self.clock() - held_since
            self.rest(held_since)
            for container in big:
                self._sweep_big(container, chunk_hits, visit, visit_part)
            # the next chunk sized to take about chunk_s, at most twice the last (a cheap chunk
            # says little about the next: a run of big containers may follow)
            size = max(64, min(50_000, 2 * size, int(size * self.chunk_s / max(elapsed, 1e-5))))
        self.cost.walk_s += self.clock() - began

    def _sweep_big(self, container: Any, chunk_hits: Hits, visit: Callable[[Any], None],
                   visit_part: VisitPart | None) -> None:  # fmt: skip
        """A container of more than BIG items is looked at a slice at a time (its items are
        its referents), never copied whole (a copy of a million items takes each a reference:
        tens of ms in one hold). Without `visit_part`, the first slice that hits has the
        container visited whole: one hold as long as the container is large. With it, every
        slice is read first, then each that hit is visited a hold apiece: a leaking list of
        millions of Works is counted in pieces (read whole, 3 M took one hold of 0.23 s)."""
        parts, hit_parts = _slices(container), []
        while True:
            held_since = self.hold()
            try:
                part = next(parts, None)
                hit = part is not None and chunk_hits(part, part)
                if hit and visit_part is None:
                    visit(container)
                elif hit:
                    hit_parts.append(part)
            except RuntimeError:  # the program resized it meanwhile (a dict, a set, a deque): copied
                parts, part, hit = _slices(_copy(container)), [], False  # whole, this once (one long hold)
                hit_parts.clear()  # (and read again from the copy: no slice visited twice)
            finally:
                self.rest(held_since)
            if part is None or (hit and visit_part is None):
                break
        for part in hit_parts:  # (only with visit_part)
            held_since = self.hold()
            try:
                visit_part(container, part)
            finally:
                self.rest(held_since)

    def _narrow(self, chunk: list[Any], chunk_hits: Hits, visit: Callable[[Any], None]) -> None:
        """Visit the objects of a chunk that hits, found by halving it: a hit is usually one
        object among thousands, and visiting each of them would be a Python call apiece."""
        if len(chunk) <= NARROW_TO:
            for obj in chunk:
                if obj is not self.objects:
                    visit(obj)
            return
        half = len(chunk) // 2
        for part in (chunk[:half], chunk[half:]):
            if chunk_hits(part, gc.get_referents(*part)):
                self._narrow(part, chunk_hits, visit)

    def each(self, items: list[Any], step: Callable[[Any], None], per_hold: int = 2000) -> None:
        """`step` over many items (is_completed() on every Work, say), a hold per `per_hold`."""
        for start in range(0, len(items), per_hold):
            held_since = self.hold()
            for item in items[start : start + per_hold]:
                step(item)
            self.rest(held_since)


def _slices(container: Any) -> Iterator[list[Any]]:
    """A big container's items (a dict's values, then its keys), BIG at a time: a list or a
    tuple sliced where it stands at each step, any other kind through one iterator."""
    if type(container) in (list, tuple):
        start = 0
        while part := container[start : start + BIG]:
            yield part
            start += BIG
        return
    sources = (container.values(), container) if type(container) is dict else (container,)
    for source in sources:
        items = iter(source)
        while part := list(islice(items, BIG)):
            yield part


def _copy(container: Any) -> list[Any]:
    return list(container.values()) + list(container) if type(container) is dict else list(container)


def _without_big(chunk: list[Any]) -> tuple[list[Any], list[Any]]:
    """The chunk less its containers of more than BIG items, and those containers."""
    sized = list(compress(chunk, map(SIZED.__contains__, map(type, chunk))))  # built-in types: their own len
    big = list(compress(sized, map(BIG.__lt__, map(len, sized))))  # (no Python loop: every sweep runs this)
    if not big:
        return chunk, big
    ids = set(map(id, big))
    return [o for o in chunk if id(o) not in ids], big


def untracked_containers(refs: list[Any]) -> list[Any]:
    """The untracked dicts and tuples among `refs` (C-speed: no Python loop per object)."""
    return list(filterfalse(gc.is_tracked, compress(refs, map(UNTRACKED_KINDS.__contains__, map(type, refs)))))


def holds_any(refs: list[Any], kinds: frozenset[type]) -> bool:
    """Whether `refs`, or the untracked containers among them (nested), hold an object of `kinds`."""
    for _ in range(NESTING):
        if not kinds.isdisjoint(map(type, refs)):
            return True
        inner = untracked_containers(refs)
        if not inner:
            return False
        refs = gc.get_referents(*inner)
    return False


def of_kinds(refs: list[Any], kinds: frozenset[type]) -> list[Any]:
    return list(compress(refs, map(kinds.__contains__, map(type, refs))))
