"""Solving the flow graph in time linear in its size: every question is one breadth-first
pass from all its sources at once, never one pass per Work.

- which `async_op=flag` calls are asynchronous: True reaches the flag;
- which functions return Works they (or their callees) made, so each call of one is a Work
  origin of its own (context: one caller's wait does not excuse another caller's list);
- which places can reach a wait, or code the program cannot see (backwards from those);
- where each origin is kept and polled: the nearest few places, carried backwards as labels;
- which kept places hold no Work the analysis can see (the poll-only reaper's containers).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from hicache_cli.lint.graph import (
    ATTR,
    CALL,
    CONTENT,
    GLOBAL,
    INSTANCE,
    LOCAL,
    ORIGIN,
    RETURN,
    TRUE,
    CallSite,
    Fact,
    Graph,
    Origin,
)
from hicache_cli.lint.program import ClassRef
from hicache_cli.lint.scopes import is_private

KEEP_LABELS = 2  # places named per finding
POLL_LABELS = 3


class Condensed:
    """The graph with unified places as one node: forward and backward adjacency by edge kind,
    and the views the questions are asked in (graph.py says what each kind of edge is):
    - `all`: every edge, the collapsed view (is a Work waited, handed on, polled, reached);
    - `objects`: which containers and functions a value holds (no loose edges: a list is not
      what it contains);
    - `kept`: where a Work is kept: no takes and no returns, so what a function returns is
      kept by each caller on its own (a call-site origin), and a Work read out of a list shared
      by two callers is not kept by both;
    - `factory`: which functions return Works they made: plain, loose and returns, stopping at
      places that outlive a call (a getter of a list is no factory)."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        size = len(g.keys)
        self.canon = [g.find(n) for n in range(size)]
        self.size = size
        self.plain = self._table(g.plain)
        self.takes = self._table(g.takes)
        self.loose = self._table(g.loose)
        self.params = self._table(g.params)
        self.returns = self._table(g.returns)
        self.all = (self.plain, self.takes, self.loose, self.params, self.returns)
        self.objects = (self.plain, self.takes, self.params, self.returns)
        self.kept = (self.plain, self.loose, self.params)
        self.factory = (self.plain, self.loose, self.returns)

    def _table(self, edges: dict[int, list[int]]) -> dict[int, list[int]]:
        canon = self.canon
        out: dict[int, list[int]] = {}
        for src, targets in edges.items():
            c = canon[src]
            row = out.setdefault(c, [])
            row.extend(canon[t] for t in targets if canon[t] != c)
        return out

    def forward(
        self, seeds: Iterable[int], tables: tuple[dict[int, list[int]], ...], stop: bytearray | None = None
    ) -> bytearray:
        seen = bytearray(self.size)
        todo = deque()
        for s in seeds:
            c = self.canon[s]
            if not seen[c]:
                seen[c] = 1
                todo.append(c)
        while todo:
            n = todo.popleft()
            if stop is not None and stop[n]:
                continue
            for table in tables:
                for m in table.get(n, ()):
                    if not seen[m]:
                        seen[m] = 1
                        todo.append(m)
        return seen

    def reverse(self, tables: tuple[dict[int, list[int]], ...]) -> dict[int, list[int]]:
        back: dict[int, list[int]] = {}
        for table in tables:
            for src, targets in table.items():
                for t in targets:
                    back.setdefault(t, []).append(src)
        return back

    def backward(self, seeds: Iterable[int], back: dict[int, list[int]]) -> bytearray:
        """What can reach a seed: forward over the reversed edges (`reverse`)."""
        return self.forward(seeds, (back,))

    def forward_labels(
        self, sources: dict[int, object], tables: tuple[dict[int, list[int]], ...], limit: int, many: object
    ) -> dict[int, list[object]]:
        """Each node -> the labels of the sources that reach it; more than `limit`: [many]."""
        found: dict[int, list[object]] = {}
        todo: deque[tuple[int, object]] = deque()

        def give(node: int, label: object) -> None:
            held = found.setdefault(node, [])
            if held and held[0] is many:
                return
            if label is many or (label not in held and len(held) >= limit):
                found[node] = [many]
                todo.append((node, many))
            elif label not in held:
                held.append(label)
                todo.append((node, label))

        for node, label in sources.items():
            give(self.canon[node], label)
        while todo:
            n, label = todo.popleft()
            if label is not many and found[n] and found[n][0] is many:
                continue
            for table in tables:
                for m in table.get(n, ()):
                    give(m, label)
        return found

    def labels(self, sources: dict[int, object], back: dict[int, list[int]], limit: int) -> dict[int, list[object]]:
        """Each node -> up to `limit` labels of the sources it can reach, nearest first."""
        found: dict[int, list[object]] = {}
        todo: deque[tuple[int, object]] = deque()
        for node, label in sources.items():
            c = self.canon[node]
            held = found.setdefault(c, [])
            if label not in held and len(held) < limit:
                held.append(label)
                todo.append((c, label))
        while todo:
            n, label = todo.popleft()
            for m in back.get(n, ()):
                held = found.setdefault(m, [])
                if len(held) < limit and label not in held:
                    held.append(label)
                    todo.append((m, label))
        return found


@dataclass
class Solution:
    graph: Graph
    condensed: Condensed
    active: list[Origin] = field(default_factory=list)  # origins whose Work is asynchronous
    waited: bytearray = field(default_factory=bytearray)  # can reach a wait
    escaped: bytearray = field(default_factory=bytearray)  # can reach code the program cannot see
    public: bytearray = field(default_factory=bytearray)  # can reach what a public function returns
    carriers: bytearray = field(default_factory=bytearray)  # reached by some Work
    not_works: bytearray = field(default_factory=bytearray)  # holds instances with their own is_completed()
    keeps: dict[int, list[object]] = field(default_factory=dict)  # node -> kept places (node ids) it reaches
    # kept place -> where things are stored in it, first per (module, function)
    stored: dict[int, dict[tuple[int, str], Fact]] = field(default_factory=dict)
    kept: dict[int, Fact] = field(default_factory=dict)  # kept local -> why it outlives its call
    first_store: dict[int, Fact] = field(default_factory=dict)
    polls: dict[int, list[object]] = field(default_factory=dict)  # node -> poll facts it reaches
    puts: dict[int, list[object]] = field(default_factory=dict)  # node -> the nearest container it is put into
    returns_work: dict[int, Origin] = field(default_factory=dict)  # RETURN/CALL node -> an origin behind it

    place_class: dict[int, object] = field(default_factory=dict)  # attribute place -> its class
    _instances: dict[object, Fact | None] = field(default_factory=dict)

    def of(self, n: int) -> int:
        return self.condensed.canon[n]

    def instance_kept(self, cls: object) -> Fact | None:
        """Where instances of `cls` are kept (the nearest attribute or module-level name holding
        one): a record's field outlives the call because the record does."""
        if cls not in self._instances:
            self._instances[cls] = None
            token = self.graph.ids.get((INSTANCE, cls))
            if token is not None:
                c = self.condensed
                seen = c.forward([token], c.all)
                places = persistent(c)
                found = [n for n in self.stored if seen[n] and places[n] and self.place_class.get(n) != cls]
                facts = [f for n in found for f in self.stored[n].values()]
                self._instances[cls] = min(facts, key=_first) if facts else None
        return self._instances[cls]


def active_origins(c: Condensed) -> list[Origin]:
    g = c.g
    truth = c.forward([g.node((TRUE,))], c.all) if (TRUE,) in g.ids else bytearray(c.size)
    return [o for o in g.origins if o.condition is None or any(truth[c.canon[n]] for n in o.condition)]


def persistent(c: Condensed) -> bytearray:
    """Places that outlive a call: attributes, module-level names, kept locals."""
    g = c.g
    out = bytearray(c.size)
    for node, key in enumerate(g.keys):
        if (key[0] == ATTR and isinstance(key[1], ClassRef)) or (key[0] == GLOBAL and key[1] != -1):
            out[c.canon[node]] = 1
    for node in g.kept:
        out[c.canon[node]] = 1
    return out


def factory_reach(c: Condensed, origins: list[Origin]) -> tuple[bytearray, dict[int, Origin]]:
    """Which return values and call results Works made inside reach, not through a kept place
    (a getter of a list of Works is not a function that makes them): forward over plain and
    return edges. The label kept is one origin behind each, for messages. A return under `if
    switch:` (a parameter defaulting to False: Megatron's `if overlap_p2p_comm: return tensor,
    wait_handles`) makes no function a factory: each call would be taken to return Works, the
    calls that leave the switch off too."""
    stop = persistent(c)
    for node in c.g.switched:
        stop[c.canon[node]] = 1
    seen = bytearray(c.size)
    behind: dict[int, Origin] = {}
    todo: deque[int] = deque()
    for origin in origins:
        n = c.canon[origin.node]
        if not seen[n]:
            seen[n] = 1
            behind[n] = origin
            todo.append(n)
    while todo:
        n = todo.popleft()
        if stop[n]:
            continue
        for table in c.factory:
            for m in table.get(n, ()):
                if not seen[m]:
                    seen[m] = 1
                    behind[m] = behind[n]
                    todo.append(m)
    return seen, behind


def call_origins(c: Condensed, reached: bytearray, behind: dict[int, Origin]) -> list[Origin]:
    """Each call of a function that returns Works it made: an origin at the call (at each
    unpacked element that holds them, for `out, work = f()`)."""
    g = c.g
    out = []
    for site in g.calls:
        elements = g.elements.get(site.node)
        if elements is None:
            ret = c.canon[site.callee_return]
            if reached[ret] and ret in behind:
                out.append(_call_origin(site, behind[ret], site.node))
            continue
        key = g.keys[site.callee_return]
        for i, element in enumerate(elements):
            source = c.canon[g.ids.get((*key, i), site.callee_return)]
            if reached[source] and source in behind:
                out.append(_call_origin(site, behind[source], element))
    return out


def _call_origin(call: CallSite, inner: Origin, node: int) -> Origin:
    site = call.site
    return Origin(
        node, f"{site.text}()", site.mid, site.span, site.function, dropped=site.dropped, group=site.group, inner=inner
    )


def solve(g: Graph, pollable: frozenset[int] = frozenset()) -> Solution:
    """`pollable`: instance tokens of classes of the program that define is_completed() or wait()
    themselves (a task, a request): what holds them is not a container of Works."""
    c = Condensed(g)
    api = active_origins(c)
    reached, behind = factory_reach(c, api)
    origins = api + call_origins(c, reached, behind)
    solution = Solution(g, c, origins)
    back_all = c.reverse(c.all)
    back_local = c.reverse(c.kept)
    solution.carriers = c.forward([o.node for o in origins], c.all)
    for node, fact, table in g.unsure:
        # `x.wait()` taken for a method of x's class (a task's): still a Work's wait where x may
        # also hold a Work (a wrapper's `self._work`, which may be a Work or another wrapper)
        if solution.carriers[c.canon[node]]:
            (g.waits if table == "wait" else g.polls).setdefault(node, fact)
    solution.waited = c.backward(list(g.waits), back_all)
    escapes = list(g.escapes)
    escapes += _returns_to_outside(g)
    solution.escaped = c.backward(escapes, back_all)
    solution.public = c.backward(_public_returns(g), back_all)
    for raw, per in g.stores.items():
        into = solution.stored.setdefault(c.canon[raw], {})
        for where, fact in per.items():
            into.setdefault(where, fact)
    for raw, key in enumerate(g.keys):
        if key[0] == ATTR and isinstance(key[1], ClassRef):
            solution.place_class.setdefault(c.canon[raw], key[1])
    places = persistent(c)
    kept = {n: n for n in solution.stored if places[n]}
    kept.update({c.canon[n]: c.canon[n] for n in g.kept})
    solution.keeps = c.labels(kept, back_local, KEEP_LABELS)
    contents = {c.canon[n]: c.canon[n] for n in solution.stored if g.keys[n][0] == CONTENT}
    solution.puts = c.labels(contents, back_local, 1)
    for raw, fact in g.kept.items():
        solution.kept.setdefault(c.canon[raw], fact)
    polls = {n: fact for n, fact in g.polls.items()}
    solution.polls = c.labels(polls, back_all, POLL_LABELS)
    solution.not_works = c.forward(pollable, c.all)
    return solution


def _public_returns(g: Graph) -> list[int]:
    """What public functions return: a library's callers outside the program may wait it, even
    when a call inside the program drops it."""
    return [
        node
        for node, key in enumerate(g.keys)
        if key[0] == RETURN and len(key) == 3 and not is_private(key[2].rsplit(".", 1)[-1])
    ]


def _returns_to_outside(g: Graph) -> list[int]:
    """Return values of public functions no call in the program links: they go to callers
    outside it (a library's users), which may wait them."""
    out = []
    for node, key in enumerate(g.keys):
        if key[0] == RETURN and node not in g.returns:
            name = key[2].rsplit(".", 1)[-1]
            if not is_private(name) or "<lambda" in key[2]:
                out.append(node)
    return out


def store_fact(solution: Solution, node: int, origin: Origin | None = None) -> Fact | None:
    """The fact naming a kept place: its store in the origin's function if any, else the first;
    for a local kept by a loop or a closure, why it is kept."""
    canon = solution.of(node)
    if canon in solution.kept:
        return solution.kept[canon]
    facts = solution.stored.get(canon)
    if not facts:
        return None
    if origin is not None and (same := facts.get((origin.mid, origin.function))) is not None:
        return same
    if canon not in solution.first_store:  # once per place: a list filled from many functions
        solution.first_store[canon] = min(facts.values(), key=_first)
    return solution.first_store[canon]


def put_fact(solution: Solution, node: int, origin: Origin) -> Fact | None:
    """Where a Work was put into the container it is kept through (`pending.append(w)` in a
    helper given the caller's list): the put in the origin's function if any, else the first."""
    found = solution.puts.get(solution.of(node), [])
    if not found:
        return None
    facts = solution.stored.get(found[0], {})  # type: ignore[call-overload]
    if not facts:
        return None
    same = facts.get((origin.mid, origin.function))
    return same if same is not None else min(facts.values(), key=_first)


def _first(fact: Fact) -> tuple[bool, int, int]:
    """Puts first (where things go in), then by module and line."""
    return (not fact.put, fact.mid, fact.line)


__all__ = ["CALL", "GLOBAL", "LOCAL", "ORIGIN", "Solution", "factory_reach", "solve"]
