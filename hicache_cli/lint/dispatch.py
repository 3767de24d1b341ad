"""Which classes a value may be an instance of, and what that decides: `x.a` is the place `a`
of those classes (a record's field, a wrapper's `work`), and `x.m(...)` calls their method `m`
(a wrapper's `wait()` that waits its Work, a helper object's `add()` that keeps it).

Every constructor call makes its class's instance token; tokens flow along the graph like any
value (into lists, through parameters and returns), and each node carries up to a few classes
(a multi-source pass, linear in the graph). A field access joins its node to each class's place;
a method call links to each class's method. That changes the graph, so it runs again until
nothing new is learnt (a few passes). What stays unknown at the end: a field is the place of
that name on any object (waits there count for every class's attribute so named), and a
method call is code the program cannot see (its arguments escape), or, failing that, this
module's methods of that name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from hicache_cli.lint.apis import PG_WORK_METHODS, PROCESS_GROUP
from hicache_cli.lint.calls import link_call
from hicache_cli.lint.containers import Containers
from hicache_cli.lint.graph import ANY_ATTR, ANY_READ, ATTR, INSTANCE, Graph, MethodCall
from hicache_cli.lint.program import ClassRef, External, FunctionRef, Program, Symbol
from hicache_cli.lint.solve import Condensed

CLASSES_PER_VALUE = 4  # more than this many classes: the value is taken as unknown
MAX_PASSES = 8
MANY = object()
PG_TOKEN = External(PROCESS_GROUP)  # the class of every ProcessGroup from torch (dist.new_group(), annotations)
PG_CALL = "ProcessGroup"  # a method call taken for a ProcessGroup's: its Work is made there


class Dispatcher:
    def __init__(
        self, program: Program, graph: Graph, analysed: set[int], symbol: Callable[[tuple], Symbol | None]
    ) -> None:
        self.program, self.g, self.analysed = program, graph, analysed
        self.containers = Containers(program, graph, analysed, symbol)
        self._settled: tuple[int, ...] = ()

    def classes(self) -> tuple[Condensed, dict[int, list[object]]]:
        """Each node (condensed) -> the classes of the instances it may hold (MANY: too many)."""
        c = Condensed(self.g)
        sources = {n: key[1] for n, key in enumerate(self.g.keys) if key[0] == INSTANCE}
        return c, c.forward_labels(sources, c.all, CLASSES_PER_VALUE, MANY)

    def run(
        self, final: bool, relevant: bytearray | None = None, returning: set[str] | frozenset[str] = frozenset()
    ) -> set[int]:
        """Resolve what the known classes decide; returns modules a dispatch leads into that are
        not analysed yet. `final`: settle what is still unknown."""
        needed: set[int] = set()
        self._passes(needed, relevant, returning)
        if final:
            self.containers.settle()
            self._passes(needed, relevant, returning)
            self._settle()
        return needed

    def _passes(self, needed: set[int], relevant: bytearray | None, returning: set[str] | frozenset[str]) -> None:
        for number in range(MAX_PASSES):
            state = (len(self.g.keys), self.g.changes, len(self.g.method_calls), len(self.analysed), len(self.g.puts))
            if state == self._settled:
                break  # nothing was added since a pass that learnt nothing
            c, labels = self.classes()
            objects = self.containers.objects(c, refresh=number == 0)
            changed = self.typed(c, labels) | self._fields(c, labels)
            changed |= self._methods(c, labels, needed, relevant, returning)
            changed |= self.containers.step(c, objects, needed)
            if not changed:
                self._settled = state
                break

    def _of(self, c: Condensed, labels: dict[int, list[object]], nodes: tuple[int, ...]) -> list[ClassRef] | None:
        found: list[ClassRef] = []
        for n in nodes:
            for label in labels.get(c.canon[n], ()):
                if label is MANY:
                    return None
                if isinstance(label, ClassRef) and label not in found:
                    found.append(label)
        return found

    def _fields(self, c: Condensed, labels: dict[int, list[object]]) -> bool:
        g = self.g
        changed = False
        for access in g.fields:
            if access.done:
                continue
            classes = self._of(c, labels, access.receiver) or []
            for cls in classes:
                if cls not in access.classes:
                    access.classes.add(cls)
                    g.union(access.node, g.node((ATTR, cls, access.attr)))
                    changed = True
        return changed

    def _methods(
        self,
        c: Condensed,
        labels: dict[int, list[object]],
        needed: set[int],
        relevant: bytearray | None,
        returning: set[str] | frozenset[str],
    ) -> bool:
        changed = False
        for call in self.g.method_calls:
            if call.done or PG_CALL in call.classes:
                continue
            if call.name in PG_WORK_METHODS and self._on_process_group(c, labels, call):
                changed = True
                continue
            classes = self._of(c, labels, tuple(call.args.receiver)) or []
            self._not_a_work(call, classes)
            for cls in classes:
                if cls in call.classes:
                    continue
                method = self.program.method(cls, call.name)
                if method is None:
                    call.classes.add(cls)
                    continue
                if method.mid not in self.analysed:
                    if relevant is None or call.name in returning or call.args.touches(relevant):
                        needed.add(method.mid)  # the Works go there (or come back from there)
                    continue
                call.classes.add(cls)
                self._link(call, method)
                changed = True
        return changed

    def _on_process_group(self, c: Condensed, labels: dict[int, list[object]], call: MethodCall) -> bool:
        """`self._pg.allreduce([t], opts)`, `pg.send([t], dst, tag)`: on a ProcessGroup (torch's, or
        a class of the program deriving from it) a Work is made where the method is called."""
        held = [label for n in call.args.receiver for label in labels.get(c.canon[n], ())]
        if not any(label == PG_TOKEN or self.program.is_process_group(label) for label in held):
            return False
        g = self.g
        call.classes.add(PG_CALL)
        call.special = True  # its arguments are the collective's tensors, not kept anywhere
        g.link([g.origin_at(call.site, f"ProcessGroup.{call.name}")], call.result)
        return True

    def typed(self, c: Condensed, labels: dict[int, list[object]]) -> bool:
        """A place annotated with a class of the program holds its instances (`manager: Manager`:
        `self._manager.allreduce(...)` is Manager.allreduce); with a ProcessGroup, any ProcessGroup."""
        changed = False
        for node, key in self.g.typed:
            cls = key if isinstance(key, ClassRef) else self.containers.symbol(key[1])
            if not isinstance(cls, ClassRef):
                continue
            token = PG_TOKEN if self.program.is_process_group(cls) else cls
            self.g.link([self.g.node((INSTANCE, token))], node)
            changed = True
        self.g.typed.clear()
        return changed

    def _not_a_work(self, call: MethodCall, classes: list[ClassRef]) -> None:
        """`task.is_completed()` on a class of the program that defines is_completed (or wait):
        that method, not a Work's; the poll (or wait) taken where it was written is not one."""
        if call.fact is None or call.name not in ("wait", "is_completed"):
            return
        if not classes or any(self.program.method(cls, call.name) is None for cls in classes):
            return
        table = self.g.waits if call.name == "wait" else self.g.polls
        for n in call.args.receiver:
            if table.get(n) is call.fact:
                del table[n]
                self.g.unsure.append((n, call.fact, call.name))  # solve.py decides
        call.fact = None

    def _link(self, call: MethodCall, method: FunctionRef) -> None:
        site = replace(call.site, text=f"{call.site.text}.{call.name}")
        link_call(self.g, method.mid, method.info, call.args, site, True, call.result)

    def _settle(self) -> None:
        """What no known class decided: a field by name, a method as unknown code."""
        g = self.g
        for access in g.fields:
            if not access.classes:
                # Unknown class: reads see every class's attribute of that name, and what is stored
                # through it may be in any of them (two hubs, so reads and writes do not join them all).
                g.link([g.node((ANY_READ, access.attr))], access.node)
                if access.node in g.stores or access.node in g.assigned:
                    by_name = g.node((ANY_ATTR, access.attr))
                    g.link([access.node], by_name)
                    for fact in g.stores.get(access.node, {}).values():
                        g.note_store(by_name, fact)  # stored through: kept where its class keeps it
            access.done = True
        for call in g.method_calls:
            if call.done:
                continue
            call.done = True
            followed = any(
                isinstance(cls, ClassRef) and self.program.method(cls, call.name) is not None for cls in call.classes
            )
            if followed:
                continue
            if call.special:
                continue  # its meaning was applied where it was written
            g.escape(call.args.given, f"passed to {call.site.text}.{call.name}()")
            # what a method of an unknown value returns may be what it holds, or anything
            g.link([*call.args.receiver, *g.unknown()], call.result)
