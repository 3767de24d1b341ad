"""The census: every live Work a process's Python objects hold, grouped by what holds them.

Taken inside the target as soon as the agent starts, before any hook is installed, so it
sees exactly what the program had accumulated: "list `Syncer.pending` holds 1,662 Works,
0 completed". Three steps, all in chunks that release the GIL between them (walk.py):

1. find every container that holds a Work directly (a Work is a pybind11 object the
   collector does not track, so it is found as what tracked objects refer to);
2. name each container by the path that reaches it (naming.py), one sweep per level;
3. count: Works per holder, how many say is_completed(), and the bytes of the tensors
   held beside them in the same containers (a record's other fields, a tuple's items).

What it cannot see: Works only C++ holds, and Works held only by a local variable of a
running function that no frame object exposes (those of other threads are looked up in
the threads' frames by identity, when the container itself is found).

Stdlib only; the Work and Tensor types come from the program's torch, passed in.
"""

from __future__ import annotations

import gc
import time
import types
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hicache_cli.attach.naming import CONTAINERS, Named, Namer, Node, attr_of, instance_dict, is_own, work_keys
from hicache_cli.attach.protocol import Census, Holder
from hicache_cli.attach.walk import BIG, NESTING, Walker, holds_any, of_kinds, untracked_containers

PLAIN = (list, set, frozenset)  # containers that hold nothing beside the Works worth counting
SiteOf = Callable[[Any], "tuple[str, int, str] | None"]  # where a Work was made, when the tracer saw it
SITES_KEPT = 3  # creation sites named per holder, most Works first


@dataclass
class Found:
    obj: Any
    works: list[Any]


def subclasses(base: type) -> frozenset[type]:
    out, todo = {base}, [base]
    while todo:
        for sub in type.__subclasses__(todo.pop()):
            if sub not in out:
                out.add(sub)
                todo.append(sub)
    return frozenset(out)


def take_census(
    work_type: type,
    tensor_type: type | None,
    pid: int,
    rank: int | None,
    when: str = "start",
    walker: Walker | None = None,
    site_of: SiteOf | None = None,
) -> Census:
    kinds = subclasses(work_type)
    walker = walker or Walker()
    cpu_started = time.thread_time()
    try:
        found, parents = find_containers(walker, kinds)
        starts = [start_node(f, kinds) for f in found.values()]
        namer = Namer(walker, kinds)
        names = namer.name_all(starts, parents) if starts else {}
        for key, now in namer.replaced.items():  # the program rebound it: what holds the Works now
            found[key] = Found(now, of_kinds(gc.get_referents(now), kinds))
        for key in namer.released:  # ... or let go of it: the census alone held it
            found.pop(key, None)
        tensor_kinds = subclasses(tensor_type) if tensor_type else frozenset()
        holders, total = tally(walker, found, names, tensor_kinds, namer.records, site_of)
    finally:
        walker.release()
        walker.cost.cpu_s = time.thread_time() - cpu_started
    return Census(pid, rank, time.time(), total, holders, walker.cost, when)


def find_containers(walker: Walker, kinds: frozenset[type]) -> tuple[dict[int, Found], dict[int, Any]]:
    """Every object holding a Work directly, by id; and for the untracked ones among them
    (dicts, tuples), the tracked object that holds each."""
    found: dict[int, Found] = {}
    parents: dict[int, Any] = {}

    def visit(obj: Any) -> None:
        if not is_own(obj):
            _collect(obj, gc.get_referents(obj), kinds, found, parents)

    def visit_part(container: Any, items: list[Any]) -> None:  # a big container's, a slice a hold
        if not is_own(container):
            _collect(container, items, kinds, found, parents, more=True)

    walker.sweep(lambda _chunk, refs: holds_any(refs, kinds), visit, visit_part)
    return found, parents


def _collect(
    holder: Any, refs: list[Any], kinds: frozenset[type], found: dict[int, Found], parents: dict[int, Any],
    parent: Any = None, depth: int = 0, more: bool = False,
) -> None:  # fmt: skip
    """Note `holder` if it holds a Work directly, then the untracked containers inside it;
    with `more`, `refs` are one more slice of a big holder's items, its Works added to those
    found before. A function of the module, not a closure calling itself: that closure would
    be a cycle keeping `found` (the program's containers and Works) alive after the census,
    until the collector's next full pass; a later census would then find our records holding them."""
    works = of_kinds(refs, kinds)
    if works and more and id(holder) in found:
        found[id(holder)].works.extend(works)
    elif works and id(holder) not in found:
        found[id(holder)] = Found(holder, works)
        if parent is not None:
            parents[id(holder)] = parent
    if depth < NESTING:
        for inner in untracked_containers(refs):
            _collect(inner, gc.get_referents(inner), kinds, found, parents, holder, depth + 1)


def start_node(found: Found, kinds: frozenset[type]) -> Node:
    obj, direct = found.obj, [id(found.obj)]
    if type(obj) is dict:
        return Node(obj, "", direct, keys=work_keys(obj, kinds), holds_works=True)
    if isinstance(obj, types.FrameType):  # a local variable of a frame the collector tracks
        return Node(obj, "", direct, keys=[found.works[0]], holds_works=True)
    if type(obj) in CONTAINERS or type(obj) is types.CellType:
        return Node(obj, "", direct, holds_works=True)
    attr = attr_of(obj, found.works[0]) or "?"
    name = f"{type(obj).__qualname__}.{attr}"  # a record: named so unless it sits in a container
    return Node(obj, f".{attr}", direct, fallback=name, holds_works=True)


def tally(
    walker: Walker,
    found: dict[int, Found],
    names: dict[int, Named],
    tensor_kinds: frozenset[type],
    records: dict[int, str],
    site_of: SiteOf | None = None,
) -> tuple[list[Holder], int]:
    """The holders by path and container kind; `records`: containers that are a record's
    attribute dict, counted as the record (as they are before its __dict__ is made). With
    `site_of` (a follow's tracer window), each holder's Works counted by creation site."""
    groups: dict[tuple[str, str], list[Found]] = {}
    for key, item in found.items():
        named = names.get(key, Named(f"(a {type(item.obj).__qualname__})", False))
        groups.setdefault((named.path, records.get(key) or type(item.obj).__qualname__), []).append(item)
    unnamed = {n.path for n in names.values() if not n.named}
    holders: list[Holder] = []
    each: list[list[Any]] = []
    for (path, container), items in groups.items():
        works = items[0].works if len(items) == 1 else list({id(w): w for i in items for w in i.works}.values())
        each.append(works)
        completed = [0]
        made_at: Counter[tuple[str, int, str]] = Counter()

        def check(work: Any, done: list[int] = completed, sites: Counter[Any] = made_at) -> None:
            try:
                done[0] += bool(work.is_completed())
            except Exception:  # noqa: BLE001 - a Work in error is not completed; the census goes on
                pass
            if site_of is not None and (site := site_of(work)) is not None:
                sites[site] += 1

        walker.each(works, check)
        tensors = _tensor_bytes(items, tensor_kinds) if type(items[0].obj) not in PLAIN else None
        sites = [[*site, n] for site, n in made_at.most_common(SITES_KEPT)] if made_at else None
        holders.append(
            Holder(path, container, len(works), completed[0], len(items), tensors, path not in unnamed, sites)
        )
    holders.sort(key=lambda h: (-h.works, h.path))
    return holders, _distinct(each)


def _distinct(each: list[list[Any]]) -> int:
    """How many distinct Works the holders hold in all (a Work may sit in two containers),
    without a set of them all: a set of a million ids, grown as it fills, is rebuilt in one
    C call each time it doubles (the program paused 0.17-0.28 s). The largest holder's are
    checked against a set of the others' (few), a slice at a time."""
    if not each:
        return 0
    largest = max(each, key=len)
    others = {id(w) for works in each if works is not largest for w in works}
    shared = 0
    for start in range(0, len(largest), BIG):
        shared += sum(map(others.__contains__, map(id, largest[start : start + BIG])))
    return len(largest) + len(others) - shared


def _tensor_bytes(items: list[Found], tensor_kinds: frozenset[type]) -> int | None:
    if not tensor_kinds:
        return None
    seen: dict[int, int] = {}
    for item in items:
        refs = gc.get_referents(item.obj)
        attributes = instance_dict(item.obj)  # a record's other fields (once its __dict__ exists)
        if attributes is not None:
            refs.extend(gc.get_referents(attributes))
        for tensor in of_kinds(refs, tensor_kinds):
            try:
                seen[id(tensor)] = int(tensor.nbytes)
            except (AttributeError, RuntimeError, TypeError):
                continue
    return sum(seen.values()) if seen else None
