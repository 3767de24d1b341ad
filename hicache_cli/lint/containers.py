"""Which containers and functions each value may hold, and what that decides: an allocation-site
points-to analysis over the flow graph, linear in its size.

Every allocation site (graph.py's containers) and every function named as a value is an object;
objects flow along plain, takes, params and returns edges like any value, and each node carries
up to OBJECTS_PER_VALUE of them (a multi-source pass: forward_labels). Then:
- a Put (`x.append(v)`, `x[k] = v`) links v into the contents of each container x may hold, so
  `pending.append(w)` in a helper reaches the caller's `self.pending` (the same list);
- a Take (`for w in x`, `x.pop()`, `a, b = x`) links each container's contents out (a tuple's
  element by index, a dict's value by key: allocations.py);
- a call of a variable (`p2p_func(...)`) calls each function it may hold.
That adds edges, so objects flow further: it runs again until nothing new is learnt (the
dispatcher's passes). What stays unresolved at the end falls back to the collapsed view: a value
put into a container nobody can tell is in the place it was put into, and a read of one is all
that place holds (`settle`); a call of a value that holds no known function is a call of code
the program cannot see.
"""

from __future__ import annotations

from collections.abc import Callable

from hicache_cli.lint.allocations import tags_agree
from hicache_cli.lint.apis import COLLECTIVES, P2P_METHODS
from hicache_cli.lint.calls import link_call
from hicache_cli.lint.config import DIST
from hicache_cli.lint.graph import TRUE, Graph, Put, Take, ValueCall
from hicache_cli.lint.program import External, FunctionRef, Program, Symbol
from hicache_cli.lint.solve import Condensed

OBJECTS_PER_VALUE = 12  # more containers or functions than this in one value: it is taken as unknown
MANY = object()


class Containers:
    def __init__(
        self, program: Program, graph: Graph, analysed: set[int], symbol: Callable[[tuple], Symbol | None]
    ) -> None:
        self.program, self.g, self.analysed, self.symbol = program, graph, analysed, symbol
        self.holds: bytearray = bytearray()  # raw node -> holds some container or function (for linking)
        self._wanted: dict[int, bool] = {}

    def objects(self, c: Condensed, refresh: bool = True) -> dict[int, list[object]]:
        """Each node (condensed) -> the containers and functions it may hold (MANY: too many).
        Only containers that can reach what a Work, a True or a wait or poll reaches are followed:
        the others decide nothing (what is put into them stays in the collapsed view), and a large
        program has hundreds of thousands of them (torch's own package)."""
        g = self.g
        if refresh or len(self._wanted) < len(g.containers):
            self._wanted = self._followed(c)
        sources: dict[int, object] = {n: n for n, wanted in self._wanted.items() if wanted}
        sources.update({n: n for n in g.functions})
        labels = c.forward_labels(sources, c.objects, OBJECTS_PER_VALUE, MANY)
        self.holds = bytearray(1 if labels.get(c.canon[n]) else 0 for n in range(c.size))
        return labels

    def _followed(self, c: Condensed) -> dict[int, bool]:
        """Container -> whether it can reach what a Work, a True, a wait or a poll reaches (worked
        out once per dispatcher run, not per pass: two reversals of the whole graph)."""
        g = self.g
        seeds = [o.node for o in g.origins] + list(g.polls)
        if (TRUE,) in g.ids:
            seeds.append(g.ids[(TRUE,)])
        hot = c.forward(seeds, c.all)  # what a Work, a True or a polled thing reaches
        settles = c.backward([*g.waits, *g.polls], c.reverse(c.all))  # what reaches a wait or a poll
        ends = [n for n in range(c.size) if hot[n]]
        ends += [r for take in g.take_ops if settles[c.canon[take.target]] for r in take.receiver]
        wanted = c.backward(ends, c.reverse(c.objects))
        return {n: bool(wanted[c.canon[n]]) for n in g.containers}

    def step(self, c: Condensed, labels: dict[int, list[object]], needed: set[int]) -> bool:
        """One pass over every Put, Take and call of a value; whether it added an edge."""
        changed = False
        for put in self.g.puts:
            for token in self._held(c, labels, put.receiver, put):
                if token in self.g.containers and token not in put.done:
                    put.done.add(token)
                    self._put(token, put)
                    changed = True
        for take in self.g.take_ops:
            for token in self._held(c, labels, take.receiver, take):
                if token in self.g.containers and token not in take.done:
                    take.done.add(token)
                    self._take(token, take)
                    changed = True
        for call in self.g.value_calls:
            for token in self._held(c, labels, call.callee, None):
                if token in self.g.functions and token not in call.done:
                    changed |= self._call(token, call, needed)
        return changed

    def settle(self) -> None:
        """What no known container decided keeps its collapsed meaning (see the docstring)."""
        g = self.g
        for put in g.puts:
            if put.unknown or not any(g.containers[t].kind != "tuple" for t in put.done):
                for target in put.receiver:
                    g.link(put.values, target)
        for take in g.take_ops:
            if take.unknown or not take.done:
                for source in take.receiver:
                    g.link([source], take.target, g.returns if take.from_call else None)
        for call in g.value_calls:
            if not call.done:
                g.escape(call.args.given, f"passed to {call.site.text}()")
                g.link(g.unknown(), call.result)
            call.done.add(-1)  # settled: nothing more is resolved for it

    def _held(
        self, c: Condensed, labels: dict[int, list[object]], nodes: tuple[int, ...], op: Put | Take | None
    ) -> list[int]:
        found: list[int] = []
        for n in nodes:
            for label in labels.get(c.canon[n], ()):
                if label is MANY:
                    if op is not None:
                        op.unknown = True
                    continue
                assert isinstance(label, int)
                found.append(label)
        return found

    def _put(self, token: int, put: Put) -> None:
        g = self.g
        box = g.containers[token]
        if box.kind == "tuple":
            return  # a tuple is never changed in place
        tag = put.key if box.kind == "dict" else None
        contents, new = g.content(token, tag)
        g.link(put.values, contents)
        g.note_store(contents, put.fact)
        if new:
            for reader in box.readers:
                if tags_agree(tag, reader.key):
                    self._out(contents, reader, reader.key is not None)

    def _take(self, token: int, take: Take) -> None:
        g = self.g
        box = g.containers[token]
        if box.kind == "tuple":
            arity = box.arity
            indices = range(arity)
            if take.index is not None:
                index = take.index + arity if take.index < 0 else take.index
                indices = range(index, index + 1) if 0 <= index < arity else range(0)
            for i in indices:
                element, _ = g.content(token, i)
                g.link([element], take.target, g.returns if take.from_call else None)
            return
        keyed = box.kind == "dict" and take.key is not None
        if box.kind == "dict":
            box.readers.append(take)
            found = [node for tag, node in box.tags.items() if tags_agree(tag, take.key)]
        else:
            found = [g.content(token)[0]]
        for contents in found:
            self._out(contents, take, keyed)
        if not take.opened and not keyed:  # `a, b = works`, `works[0]`: each may get anything it holds
            take.opened = True
            for source in take.receiver:
                g.link([source], take.target, g.loose)

    def _out(self, contents: int, take: Take, keyed: bool) -> None:
        """Contents read out: what one key holds is that value (plain, as a tuple's element);
        what a list holds is read out of an object every holder shares, so a Work read there is
        not kept by each of them (takes: the `kept` view leaves them out; the loose edge from
        the reader's own container stands for them)."""
        table = self.g.returns if take.from_call else None if keyed else self.g.takes
        self.g.link([contents], take.target, table)

    def _call(self, token: int, call: ValueCall, needed: set[int]) -> bool:
        """A call of a value that may hold this function: linked like a call written by name."""
        named = self.g.functions[token]
        bound = False
        if isinstance(named, tuple) and named[0] == "bound":
            named, bound = named[1], True
        elif isinstance(named, tuple) and named[0] in ("dotted", "in"):
            named = self.symbol(named)
        if isinstance(named, External) and named.qualname.startswith(DIST + "."):
            named = ("api", named.qualname[len(DIST) + 1 :])
        if isinstance(named, FunctionRef):
            if named.mid not in self.analysed:
                needed.add(named.mid)
                return False  # the module is walked next round; linked then
            call.done.add(token)
            link_call(self.g, named.mid, named.info, call.args, call.site, bound, call.result)
            return True
        call.done.add(token)
        if isinstance(named, tuple) and named[0] == "api" and not call.made:
            self._api(named[1], call)  # one Work per call, whichever API the variable holds
            return True
        return False  # a class, a module, a name: not a function the analysis follows

    def _api(self, api: str, call: ValueCall) -> None:
        """`send = dist.isend` ... `send(t, dst)`: a Work made where the variable is called."""
        g = self.g
        condition: tuple[int, ...] | None = None
        if api in COLLECTIVES:
            if call.async_op is None:
                return
            condition = None if -1 in call.async_op else tuple(call.async_op)
            api = f"{api}(async_op=True)"
        elif api not in P2P_METHODS:
            return
        g.link([g.origin_at(call.site, api, call.tensor, condition)], call.result)
        call.made = True
