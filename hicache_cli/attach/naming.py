"""Naming what holds the Works: the attribute path that reaches each container.

From each container that holds Works directly, the namer climbs to what refers to it, one
level per sweep of the heap (all open containers at once), until a level names it:

- an attribute of an instance: `Syncer.pending`; of a class: `Syncer.pending` too;
- a module global: `app.PENDING`;
- a closure variable: `make_sender.<locals>.works`; a local of a running function:
  `main.<locals>.pending` (read from the threads' frames when nothing else refers to it);
- on the way up, anonymous containers add `[*]` (a list, tuple, deque or set) or a key
  pattern (`[<int>]`, a dict), and a record holding a Work in an attribute adds `.handle`:
  `Backend.ongoing_reqs[*].handle`. A record that sits in no container is named by its
  own class: `Record.handle`.

The program runs on while the census sweeps, so a container it rebinds every round
(`self.pending = [w for w in self.pending if ...]`) is gone from its holder by the time it
is named: nothing refers to it any more. Such a container is found again by what it held
(`refind`: its holder and key read in the same hold as the new container), and one that
only the census still holds (the program let go of it meanwhile) is no holder (`let_go`).

Stdlib only: it runs inside the target.
"""

from __future__ import annotations

import collections
import gc
import os
import sys
import threading
import types
from dataclasses import dataclass
from itertools import compress, islice
from typing import Any

from hicache_cli.attach.walk import BIG, Walker

MAX_LEVELS = 6
REREADS = 3  # a holder read again when the program rebinds it between two reads of the census
CONTAINERS = (list, tuple, set, frozenset, collections.deque)
CO_OPTIMIZED = 0x1  # a function's frame (its locals are fast locals, not a dict)
PEP_667 = sys.version_info >= (3, 13)  # frame.f_locals is a live view, not a snapshot dict


@dataclass
class Node:
    """A step of a climb: `obj`, and the path from it down to the container of the Works."""

    obj: Any
    below: str  # e.g. "" (obj is the container), ".handle", "[*].handle", "[<int>]"
    direct: list[int]  # ids of the containers (holding Works) whose name this climb decides
    # a record (an instance holding a Work in an attribute) climbs only through anonymous
    # containers; anywhere else it is named by its own class: this name (None once inside one)
    fallback: str | None = None
    keys: list[Any] | None = None  # obj is a dict reached from its child: the child's keys
    holds_works: bool = False  # obj is the container of the Works itself
    seen: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Named:
    path: str
    named: bool = True


ANONYMOUS, NAMED, OTHER = 3, 0, 6  # priorities: a name beats a container beats a guess
OWN_FILES = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,)  # hicache_cli/
OWN_MODULES = (__name__.rpartition(".")[0] + ".",)  # hicache_cli.attach.: the census's records


def is_own(obj: Any) -> bool:
    """The census's own, never a holder nor on a holder's path: a frame or generator running
    hicache's code (its locals refer to everything the census looks at), or a record of the
    attach package (a `Found`, a `Node`: they hold what the census found)."""
    module = type(obj).__module__
    if isinstance(module, str) and module.startswith(OWN_MODULES):
        return True
    if isinstance(obj, types.FrameType):
        code = obj.f_code
    elif isinstance(obj, types.GeneratorType):
        code = obj.gi_code
    else:
        return False
    return code.co_filename.startswith(OWN_FILES)


class Namer:
    def __init__(self, walker: Walker, kinds: frozenset[type] = frozenset()) -> None:
        self.walker = walker
        self.kinds = kinds  # the Work types
        # direct containers the program replaced since the snapshot -> the one holding the Works now
        self.replaced: dict[int, Any] = {}
        self.released: set[int] = set()  # direct containers the program let go of since the snapshot
        # a module under two names (multiprocessing aliases __main__ as __mp_main__): its own name
        self.module_dicts = {id(vars(m)): name for name, m in list(sys.modules.items()) if m is not None}
        self.module_dicts.update({id(vars(m)): m.__name__ for m in list(sys.modules.values()) if m is not None})
        self.me = threading.get_ident()
        # direct containers that are a record's attribute dict (once something read its
        # __dict__, 3.11+ keeps the attributes there): id -> the record's class name
        self.records: dict[int, str] = {}

    # -- the climb -----------------------------------------------------------------------

    def name_all(self, starts: list[Node], parents: dict[int, Any]) -> dict[int, Named]:
        """The name of every direct container; `parents`: untracked containers' holders
        (nothing else can refer to an untracked container: no sweep needed for them)."""
        names: dict[int, Named] = {}
        open_nodes = starts
        for _level in range(MAX_LEVELS):
            if not open_nodes:
                break
            targets = {id(n.obj) for n in open_nodes if id(n.obj) not in parents}
            found = self.referrers(targets) if targets else {}
            next_nodes: dict[tuple[int, str, str | None], Node] = {}
            outcomes: list[tuple[Node, Node | Named]] = []
            lost = []
            # which referrers still refer, for every node before any is stepped: stepping reads an
            # instance's __dict__, and 3.11+ then keeps its attributes there, one level further
            # (a scheduler with a list and a dict of Works lost the second to "(a list no Python
            # object refers to)")
            still: dict[int, list[Any]] = {}
            for node in open_nodes:
                refs = [parents[id(node.obj)]] if id(node.obj) in parents else found.get(id(node.obj), [])
                still[id(node.obj)] = [r for r in refs if _refers(r, node.obj)]
            for node in open_nodes:
                outcome = self.step(node, still[id(node.obj)])
                if outcome is not None:
                    outcomes.append((node, outcome))
                elif (named := self.in_frames(node)) is not None:
                    outcomes.append((node, named))
                else:
                    lost.append(node)
            again = self.refind(lost) if lost else {}
            left = [node for node in lost if id(node.obj) not in again]
            gone = self.let_go(left) if left else set()
            for node in left:
                if id(node.obj) in gone:  # the program let go of it since the snapshot: not a holder
                    self.released.update(node.direct)
            outcomes += [(n, again.get(id(n.obj)) or self.unreferenced(n)) for n in lost if id(n.obj) not in gone]
            for node, outcome in outcomes:
                if isinstance(outcome, Named):
                    for direct in node.direct:
                        names.setdefault(direct, outcome)
                    continue
                key = (id(outcome.obj), outcome.below, outcome.fallback)
                if key in next_nodes:
                    next_nodes[key].direct.extend(outcome.direct)
                else:
                    next_nodes[key] = outcome
            open_nodes = list(next_nodes.values())
        for node in open_nodes:  # still climbing after MAX_LEVELS
            for direct in node.direct:
                names.setdefault(direct, Named(node.fallback or f"(deep in a {_type(node.obj)}){node.below}", False))
        return names

    def referrers(self, targets: set[int]) -> dict[int, list[Any]]:
        """What refers to each target: one chunked sweep of the heap."""
        found: dict[int, list[Any]] = {}

        def hits(_chunk: list[Any], refs: list[Any]) -> bool:
            return not targets.isdisjoint(map(id, refs))

        def visit(obj: Any) -> None:
            visit_part(obj, gc.get_referents(obj))

        def visit_part(obj: Any, refs: list[Any]) -> None:  # (a big container's: a slice a hold)
            if not is_own(obj):
                for ref in compress(refs, map(targets.__contains__, map(id, refs))):
                    found.setdefault(id(ref), []).append(obj)

        self.walker.sweep(hits, visit, visit_part)
        return found

    def refind(self, lost: list[Node]) -> dict[int, Node | Named]:
        """Containers nothing refers to any more, because the program replaced them since the
        snapshot: `self.pending = [w for w in self.pending if ...]` makes a new list every
        step, and a module's `work_list = work_list[c:]` too. Each is found again by what it
        holds (its Works, or the containers below it): one sweep for the objects that refer
        to a container holding the same items, the container and the object's key for it
        read in the same hold, so the name is right however often the program rebinds it.
        By id(lost node's object): its outcome, as `step` gives one."""
        wanted: dict[int, list[Node]] = {}  # id of an item a lost container held -> the lost nodes
        for node in lost:
            direct = set(node.direct)
            for item in gc.get_referents(node.obj):
                if type(item) in self.kinds or id(item) in direct:
                    wanted.setdefault(id(item), []).append(node)
        if not wanted:
            return {}
        stale = {id(n.obj) for n in lost}
        rebound = frozenset(type(n.obj) for n in lost)  # a new container of the same kind
        best: dict[int, tuple[int, Node | Named]] = {}

        def hits(_chunk: list[Any], refs: list[Any]) -> bool:
            inner = of_types(refs, rebound)
            if not inner:
                return False
            large = list(map(_big, inner))
            big = list(compress(inner, large))
            small = [c for c, is_big in zip(inner, large, strict=True) if not is_big]
            items = gc.get_referents(*small) if small else []
            items += [item for container in big for item in _samples(container)]
            return not wanted.keys().isdisjoint(map(id, items))

        def visit(obj: Any) -> None:
            if is_own(obj):
                return
            for _ in range(REREADS):  # the program rebound it again while it was read: read again
                moved = False
                for container in of_types(gc.get_referents(obj), rebound):
                    if id(container) in stale:
                        continue
                    items = _samples(container) if _big(container) else gc.get_referents(container)
                    for node in {id(n): n for i in items for n in wanted.get(id(i), ())}.values():
                        moved |= not self.replace(node, container, obj, best)
                if not moved:
                    return

        self.walker.sweep(hits, visit)
        return {key: outcome for key, (_priority, outcome) in best.items()}

    def let_go(self, left: list[Node]) -> set[int]:
        """Of containers nothing names, those only the census still holds: the program let
        go of them while it ran (the argument tuple of a call that has returned, the list a
        drained reaper replaced: its Works waited and gone), by id. One look at what refers
        to them (gc.get_referrers: one hold of the GIL, as long as the snapshot's); a
        container that C alone holds stays, unnamed."""
        held_since = self.walker.clock()
        ours = (self.walker.objects, targets := tuple(n.obj for n in left))  # (the call's own arguments)
        try:
            found = gc.get_referrers(*targets)
            referrers = [r for r in found if not any(r is o for o in ours) and not is_own(r)]
            return {id(n.obj) for n in left if not any(_refers(r, n.obj) for r in referrers)}
        finally:
            self.walker.rest(held_since)

    def replace(self, node: Node, container: Any, holder: Any, best: dict[int, tuple[int, Node | Named]]) -> bool:
        """`container` (referred to by `holder`) holds what the lost node's object held: the
        node climbs on from it, classified now, while `holder` still refers to it; False when
        `holder` no longer does (rebound again meanwhile: the GIL changed hands)."""
        keys = None
        if node.holds_works and type(container) is dict:
            keys = work_keys(container, self.kinds)
        elif node.keys is not None and type(container) is dict:
            keys = node.keys
        again = Node(container, node.below, node.direct, node.fallback, keys, node.holds_works, node.seen)
        try:
            outcome = self.classify(again, holder)
        except Exception:  # noqa: BLE001 - a program's odd object names nothing
            return True
        if outcome is None:
            return _refers(holder, container)  # still its: it names nothing (a type, a module); else moved on
        previous = best.get(id(node.obj))
        if previous is None or outcome[0] < previous[0]:
            best[id(node.obj)] = outcome
            if node.holds_works:
                self.replaced[id(node.obj)] = container
        return True

    def step(self, node: Node, refs: list[Any]) -> Node | Named | None:
        """One level up from `node`: a name, or the next node to climb from; None when
        nothing the collector tracks refers to it (any more)."""
        if node.holds_works and id(node.obj) in self.module_dicts:  # Works kept as module globals
            return Named(f"{self.module_dicts[id(node.obj)]}.{_first(node.keys)}")
        if isinstance(node.obj, types.FrameType):  # Works in a local of a frame the collector tracks
            frame = node.obj
            return Named(f"{_code_name(frame.f_code)}.<locals>.{self.local_name(frame, _first_obj(node.keys)) or '?'}")
        best: tuple[int, Node | Named] | None = None
        for ref in refs:
            if id(ref) in node.seen or ref is node.obj:
                continue
            try:
                outcome = self.classify(node, ref)
            except Exception:  # noqa: BLE001 - a program's odd object (a failing descriptor) names nothing
                continue
            if outcome is not None and (best is None or outcome[0] < best[0]):
                best = outcome
        return best[1] if best is not None else None

    def classify(self, node: Node, ref: Any) -> tuple[int, Node | Named] | None:
        """(priority, outcome) for `ref`, which refers to node.obj; lower priority wins."""
        obj = node.obj
        seen = node.seen | {id(obj)}
        if node.keys is not None and type(obj) is dict:
            owned = self.owned_dict(node, ref)
            if owned is not None:
                return owned
            # an anonymous dict: its key pattern joins the path, and it is climbed like a list
            node = Node(obj, f"[{_pattern(obj)}]{node.below}", node.direct, None, None, node.holds_works, node.seen)
        below = node.below
        if id(ref) in self.module_dicts:
            key = _key_of(ref, obj)
            if key == "?":
                return None  # rebound since it was found: the module holds another one now
            return NAMED, Named(node.fallback or f"{self.module_dicts[id(ref)]}.{key}{below}")
        kind = type(ref)
        if kind is dict:
            keys = [k for k, v in list(ref.items()) if v is obj]
            if not keys:
                return None  # (the same)
            return ANONYMOUS, Node(ref, below, node.direct, node.fallback, keys, False, seen)
        if kind in CONTAINERS:
            if kind is tuple and type(obj) is types.CellType:  # a closure: its function is next
                return ANONYMOUS, Node(ref, below, node.direct, None, [obj], False, seen)
            return ANONYMOUS, Node(ref, "[*]" + below, node.direct, None, None, False, seen)
        if kind is types.CellType:
            return 2, Node(ref, below, node.direct, None, None, False, seen)
        if node.fallback is not None:
            return 5, Named(node.fallback)
        return self.named_by(node, ref)

    def owned_dict(self, node: Node, ref: Any) -> tuple[int, Node | Named] | None:
        """When node.obj is the attribute dict of `ref` (an instance's __dict__, a class's
        namespace), the child is an attribute of `ref`; None for an anonymous dict."""
        obj, key, below = node.obj, _first(node.keys), node.below
        if isinstance(ref, type) and any(r is obj for r in gc.get_referents(ref)):
            return NAMED, Named(node.fallback or f"{ref.__qualname__}.{key}{below}")
        if instance_dict(ref) is not obj:
            return None
        if node.holds_works:  # Works in an instance's attributes: the instance is a record
            name = f"{type(ref).__qualname__}.{key}"
            self.records.update(dict.fromkeys(node.direct, type(ref).__qualname__))
            return 2, Node(ref, f".{key}", node.direct, name, None, False, node.seen | {id(obj)})
        return NAMED, Named(node.fallback or f"{type(ref).__qualname__}.{key}{below}")

    def named_by(self, node: Node, ref: Any) -> tuple[int, Node | Named] | None:
        obj, below = node.obj, node.below
        if isinstance(ref, types.FunctionType):
            if ref.__closure__ is obj and node.keys:
                index = next(i for i, cell in enumerate(obj) if cell is node.keys[0])
                return 1, Named(f"{_outer(ref.__qualname__)}.<locals>.{ref.__code__.co_freevars[index]}{below}")
            return 4, Named(f"{ref.__qualname__}(){below}")
        if isinstance(ref, types.FrameType):
            var = self.local_name(ref, obj)
            return (1, Named(f"{_code_name(ref.f_code)}.<locals>.{var}{below}")) if var else None
        if isinstance(ref, (types.GeneratorType, types.CoroutineType)):
            frame = getattr(ref, "gi_frame", None) or getattr(ref, "cr_frame", None)
            var = self.local_name(frame, obj) if frame is not None else None
            return (1, Named(f"{ref.__qualname__}.<locals>.{var}{below}")) if var else None
        if isinstance(ref, (type, types.ModuleType)):
            return None  # they refer to their namespace dict, met above
        attr = attr_of(ref, obj)
        if attr is None:
            if not _refers(ref, obj):
                return None  # rebound since it was found
            return OTHER, Named(f"{_type(ref)}(?){below}", False)
        return NAMED, Named(f"{_type(ref)}.{attr}{below}")

    def in_frames(self, node: Node) -> Named | None:
        """Nothing the collector tracks refers to node.obj: a running function's local? Or,
        for a tuple holding Works, the arguments of a C call in progress (a pybind method
        call builds one: `work.wait()` blocked in a recv), whose Work a frame holds: named by
        that frame's local (`recv.<locals>.work`)."""
        obj, below = node.obj, self._below(node)
        items = [i for i in obj if type(i) in self.kinds] if node.holds_works and type(obj) is tuple else []
        for frame in self.frames():
            var = self.local_name(frame, obj)
            if var:
                return Named(node.fallback or f"{_code_name(frame.f_code)}.<locals>.{var}{below}")
            for item in items:
                if var := self.local_name(frame, item):
                    return Named(f"{_code_name(frame.f_code)}.<locals>.{var}")
        return None

    def unreferenced(self, node: Node) -> Named:
        """Nothing refers to node.obj, no frame holds it and nothing holds what it held:
        something only C++ holds."""
        if node.fallback is not None:
            return Named(node.fallback)
        return Named(f"(a {_type(node.obj)} no Python object refers to){self._below(node)}", False)

    @staticmethod
    def _below(node: Node) -> str:
        if type(node.obj) is dict and node.keys is not None:
            return f"[{_pattern(node.obj)}]{node.below}"
        return node.below

    # -- helpers -----------------------------------------------------------------------

    def frames(self) -> list[types.FrameType]:
        out = []
        for ident, frame in sys._current_frames().items():
            if ident == self.me:
                continue
            while frame is not None:
                out.append(frame)
                frame = frame.f_back
        return out

    def local_name(self, frame: types.FrameType, obj: Any) -> str | None:
        """The local variable of `frame` that is `obj`. Before 3.13, reading f_locals of a
        function's frame leaves a snapshot dict on the frame that would keep every local
        of that moment alive until the function returns: it is emptied after reading."""
        code = frame.f_code
        if code.co_filename.startswith(OWN_FILES):
            return None
        function = bool(code.co_flags & CO_OPTIMIZED)
        if not function:
            return None  # a module's body: its locals are its globals, named as such
        local_vars = frame.f_locals
        try:
            return next((k for k, v in list(local_vars.items()) if v is obj), None)
        finally:
            if not PEP_667 and type(local_vars) is dict:
                local_vars.clear()


def of_types(objects: list[Any], kinds: frozenset[type]) -> list[Any]:
    return list(compress(objects, map(kinds.__contains__, map(type, objects))))


# the built-in containers whose size is read without running any of the program's code; a
# record of the program's (a dataclass holding a Work) is read through gc.get_referents
SIZED = (list, tuple, dict, set, frozenset, collections.deque)


def _big(container: Any) -> bool:
    return type(container) in SIZED and len(container) > BIG


def _samples(container: Any) -> list[Any]:
    """A few items of a container too big to read whole in one hold (a rebuilt list keeps
    its order: its first Works are the oldest, which the lost one held too)."""
    if type(container) is dict:
        return list(islice(container.values(), 3))
    if type(container) in (set, frozenset):
        return list(islice(container, 3))
    return [container[0], container[len(container) // 2], container[-1]] if len(container) else []


def _refers(holder: Any, obj: Any) -> bool:
    """Whether `holder` still refers to `obj` (a holder found earlier in the census may have
    been given a new container since: then it is no longer `obj`'s)."""
    return any(r is obj for r in gc.get_referents(holder))


def _key_of(mapping: Any, value: Any) -> str:
    try:
        return next((str(k) for k, v in list(mapping.items()) if v is value), "?")
    except (AttributeError, TypeError):
        return "?"


def work_keys(mapping: dict[Any, Any], kinds: frozenset[type]) -> list[Any]:
    """The first key whose value is a Work, in a list (a name needs one): read in one C call,
    without a tuple an item (list(d.items()) of a dict of a million Works made a million, and
    the collector's full pass they set off paused the program 0.36 s)."""
    first = next(compress(mapping, map(kinds.__contains__, map(type, mapping.values()))), _NONE)
    return [] if first is _NONE else [first]


_NONE = object()


def _pattern(mapping: dict[Any, Any]) -> str:
    """`<int>` for a dict keyed by ints: the types of all its keys."""
    kinds = sorted({type(k).__name__ for k in list(mapping)})
    return "<" + "|".join(kinds) + ">" if kinds else "<?>"


def _first(keys: list[Any] | None) -> str:
    return str(keys[0]) if keys else "?"


def _first_obj(keys: list[Any] | None) -> Any:
    return keys[0] if keys else None


def _type(obj: Any) -> str:
    return type(obj).__qualname__


def instance_dict(obj: Any) -> Any:
    try:
        return object.__getattribute__(obj, "__dict__")
    except (AttributeError, TypeError):
        return None


def attr_of(obj: Any, value: Any) -> str | None:
    """The attribute of `obj` that is `value` (instance dict or __slots__)."""
    found = _key_of(instance_dict(obj) or {}, value)
    if found != "?":
        return found
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            try:
                if object.__getattribute__(obj, slot) is value:
                    return slot
            except AttributeError:
                continue
    return None


def _outer(qualname: str) -> str:
    """`make_sender.<locals>.send` -> `make_sender`: the function whose local it was."""
    return qualname.rsplit(".<locals>.", 1)[0] if ".<locals>." in qualname else qualname


def _code_name(code: types.CodeType) -> str:
    return getattr(code, "co_qualname", code.co_name)
