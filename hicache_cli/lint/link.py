"""Linking: what the module walks left to the program. Attribute places of one class
hierarchy become one place (a mixin's `self.work_list` is its host's), another module's
module-level name becomes that module's place, and calls into other modules are resolved: to
a function of the program (arguments to parameters, its return to the call's result), a class
(its __init__ and fields), a torch.distributed API behind a wrapper or a re-export (a Work
origin), or code outside the program."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hicache_cli.lint.apis import (
    COLLECTIVES,
    INERT_CALLS,
    P2P_METHODS,
    PASS_THROUGH_QUALIFIED,
    PG_WORK_METHODS,
    READ_METHODS,
    STORE_METHODS,
    WAIT_FUNCTIONS,
    method_api,
)
from hicache_cli.lint.calls import PendingCall, link_call
from hicache_cli.lint.config import DIST
from hicache_cli.lint.graph import (
    ANY_ATTR,
    ANY_READ,
    ATTR,
    GLOBAL,
    INSTANCE,
    NOTHING,
    Args,
    Fact,
    Graph,
    Nodes,
)
from hicache_cli.lint.program import ClassRef, External, FunctionRef, GlobalRef, ModuleRef, Program, Symbol

DIST_PREFIX = DIST + "."


@dataclass(frozen=True, slots=True)
class Forward:
    """A torch.autograd.Function's static forward, called through `apply` (ctx first)."""

    ref: FunctionRef


class Linker:
    def __init__(self, program: Program, graph: Graph, pending: list[PendingCall], analysed: set[int]) -> None:
        self.program, self.g, self.pending, self.analysed = program, graph, pending, analysed
        self._symbols: dict[tuple, Symbol | None] = {}
        self.linked = 0  # calls linked so far
        self._sites: dict[int, object] = {}
        self._sites_seen = 0
        self._elements_done: set[int] = set()

    # --- places ---------------------------------------------------------------------------------

    def class_of(self, key: object) -> ClassRef | ModuleRef | None:
        """A class key from a walk -> the class (or module) it names, if the program has it."""
        if isinstance(key, ClassRef):
            return key
        if isinstance(key, tuple) and key and key[0] == "sym":
            found = self.symbol(key[1])
            return found if isinstance(found, ClassRef | ModuleRef) else None
        return None

    def symbol(self, symbol: tuple) -> Symbol | None:
        if symbol not in self._symbols:
            if symbol[0] == "dotted":
                found = self.program.resolve(symbol[1])
            elif symbol[0] == "in":
                found = self.program.resolve_in(symbol[1], list(symbol[2]))
            else:
                found = None
            self._symbols[symbol] = found
        return self._symbols[symbol]

    def unify(self) -> None:
        """Every attribute node joined to its hierarchy's place (or the module's name, or the
        by-name place), and every other module's name to that module's place. Run after each
        round: hierarchies grow as modules are added."""
        g = self.g
        for node in range(len(g.keys)):
            key = g.keys[node]
            if key[0] in (ATTR, GLOBAL) and not isinstance(key[1], ClassRef) and not self._flows(node):
                continue  # another module's name read once and never passed on: nothing to join
            if key[0] == ATTR:
                owner = self.class_of(key[1])
                if isinstance(owner, ClassRef):
                    owners = self.program.owners(owner, key[2])
                    for other in owners[1:]:
                        g.union(node, g.node((ATTR, other, key[2])))
                    canonical = (ATTR, owners[0], key[2])
                elif isinstance(owner, ModuleRef):
                    canonical = (GLOBAL, owner.mid, key[2])
                else:
                    canonical = (ANY_ATTR, key[2])
                if canonical != key:
                    g.union(node, g.node(canonical))
            elif key[0] == GLOBAL and key[1] == -1:
                found = self.symbol(("dotted", key[2]))
                if isinstance(found, GlobalRef):
                    g.union(node, g.node((GLOBAL, found.mid, found.name)))

    def _flows(self, node: int) -> bool:
        """Whether anything is stored in, read out of, waited or polled at a node."""
        g = self.g
        return node in g.stores or node in g.plain or node in g.waits or node in g.polls or node in g.assigned

    def by_name_edges(self) -> None:
        """What is stored through an object of unknown class (`task.handle = work`) may be in any
        class's attribute of that name: an edge from the by-name place to each that a class of
        the program assigns. A place no class assigns belongs to code outside the program (a base
        class elsewhere, a mixin's host, another library's object): what is kept there is theirs."""
        g = self.g
        members: dict[int, list[int]] = {}
        for node in range(len(g.keys)):
            members.setdefault(g.find(node), []).append(node)
        owned_by_name: dict[str, list[int]] = {}
        for canon, nodes in members.items():
            key = g.keys[canon]
            places = [g.keys[n] for n in nodes if g.keys[n][0] == ATTR and isinstance(g.keys[n][1], ClassRef)]
            if places:
                attr = places[0][2]
                if any(n in g.assigned for n in nodes) or any(self.program.declares(p[1], attr) for p in places):
                    owned_by_name.setdefault(attr, []).append(canon)
                elif any(n in g.stores for n in nodes):
                    g.escape([canon], f"kept in {attr}, an attribute no class in the program assigns")
            elif all(g.keys[n][0] != GLOBAL or g.keys[n][1] == -1 for n in nodes) and any(
                g.keys[n][0] == GLOBAL and n in g.stores for n in nodes
            ):
                name = next(g.keys[n][2] for n in nodes if g.keys[n][0] == GLOBAL)
                g.escape([canon], f"kept in {name}, a name outside the program")
        every_by_name: dict[str, list[int]] = {}
        for canon, nodes in members.items():
            for n in nodes:
                key = g.keys[n]
                if key[0] == ATTR and isinstance(key[1], ClassRef):
                    every_by_name.setdefault(key[2], []).append(canon)
                    break
        for canon, nodes in members.items():
            for n in nodes:
                key = g.keys[n]
                if key[0] == ANY_READ:
                    for source in dict.fromkeys(every_by_name.get(key[1], ())):
                        g.link([source], canon)
                elif key[0] == ANY_ATTR and any(m in g.stores or g.find(m) != m for m in nodes):
                    targets = owned_by_name.get(key[1])
                    if targets:
                        for target in targets:
                            g.link([canon], target)
                    else:
                        g.escape([canon], f"kept in .{key[1]} of an object whose class the program does not know")

    def elements(self, final: bool) -> None:
        """`out, work = f()`: each element gets the callee's element of that index (`return out,
        work`), or its whole return value. A call of code outside the program: the whole result,
        once nothing more can be learnt about it."""
        g = self.g
        sites = {site.node: site for site in g.calls[self._sites_seen :]}
        self._sites_seen = len(g.calls)
        self._sites.update(sites)
        for result, elements in g.elements.items():
            if result in self._elements_done:
                continue
            site = self._sites.get(result)
            if site is None:
                if final:
                    for element in elements:
                        g.link([result], element)
                    self._elements_done.add(result)
                continue
            key = g.keys[site.callee_return]
            for i, element in enumerate(elements):
                source = g.ids.get((*key, i), site.callee_return)
                g.link([source], element, g.returns)
            self._elements_done.add(result)

    # --- calls ----------------------------------------------------------------------------------

    def resolve_calls(
        self,
        relevant: bytearray,
        factories: set[str],
        final: bool,
        feeds: bytearray | None = None,
        lent: bytearray | None = None,
    ) -> set[int]:
        """Link the calls that can matter: those whose arguments (or receiver) may hold a Work or
        True, or that name a function returning Works; and calls into analysed modules that are
        lent a container or a function (`Sender(self.pending)`: the callee may fill the caller's
        list). Returns the modules they lead into that are not analysed yet. `final`: what is
        still unresolved is code the program cannot see."""
        needed: set[int] = set()
        for call in self.pending:
            if call.done:
                continue
            matters = _touches(call, relevant) or _last_name(call.symbol) in factories
            if not matters and feeds is not None:
                # a constructor or a getter whose value decides where Works go (`get_pp_group()`
                # in `get_pp_group().isend_tensor_dict(...)`)
                matters = call.result < len(feeds) and bool(feeds[call.result])
            lends = not matters and lent is not None and call.args.touches(lent)
            if not matters and not lends:
                call.done = call.done or final  # nothing that matters goes in or comes out: no edge to add
                continue
            target = self._target(call)
            ref = target.ref if isinstance(target, Forward) else target
            mid = ref.mid if isinstance(ref, FunctionRef) else None
            if mid is not None and mid not in self.analysed:
                if not final:
                    if matters:
                        needed.add(mid)
                    continue
                if lends:
                    call.done = True  # lent to code that is never read: as code outside the program
                    continue
                target = None
            elif lends and target is None:
                if final:
                    call.done = True
                continue
            self._link(call, target)
            self.linked += 1
            call.done = True
        return needed

    def _target(self, call: PendingCall) -> Symbol | Forward | None:
        kind = call.symbol[0]
        if kind == "method":
            key = call.symbol[1]
            above = isinstance(key, tuple) and len(key) == 2 and key[0] == "super"
            owner = self.class_of(key[1] if above else key)
            if isinstance(owner, ClassRef):
                name = call.symbol[2]
                if name in PG_WORK_METHODS and self.program.is_process_group(owner):
                    return External(f"ProcessGroup.{name}")
                if above:  # `super().__init__(work, ...)`: the first base that has it
                    found = (self.program.method(base, name) for base in self.program.parents(owner))
                    return next((m for m in found if m is not None), None)
                return self.program.method(owner, name) or self._forward(owner, name)
            return None
        found = self.symbol(call.symbol)
        if found is None and _last_name(call.symbol) == "apply":  # `SeqAllToAll.apply(...)`, imported
            owner = self.symbol(_without_last(call.symbol))
            return self._forward(owner, "apply") if isinstance(owner, ClassRef) else None
        if isinstance(found, ClassRef):
            init = self.program.method(found, "__init__")
            if init is not None and init.mid not in self.analysed:
                return init  # the module to analyse first
        return found

    def _forward(self, owner: ClassRef, name: str) -> Forward | None:
        """`Fn.apply(x, ...)` on a torch.autograd.Function of the program runs its static
        `forward(ctx, x, ...)`: what apply is given goes to forward's parameters after ctx."""
        if name != "apply":
            return None
        forward = self.program.method(owner, "forward")
        return Forward(forward) if forward is not None and not forward.info.bound else None

    def _link(self, call: PendingCall, target: Symbol | Forward | None) -> None:
        g = self.g
        given = call.args.given
        if isinstance(target, Forward):
            args = Args((NOTHING, *call.args.positional), call.args.keywords)
            link_call(g, target.ref.mid, target.ref.info, args, call.site, False, call.result)
            return
        if isinstance(target, External) and target.qualname.startswith("ProcessGroup."):
            g.link([g.origin_at(call.site, target.qualname)], call.result)
            return
        if (
            isinstance(target, FunctionRef)
            and target.info.qualname.endswith(".__init__")
            and call.symbol[0] != "method"
        ):
            cls = self.symbol(call.symbol)
            target = cls if isinstance(cls, ClassRef) else None
        if isinstance(target, FunctionRef):
            link_call(g, target.mid, target.info, call.args, call.site, call.symbol[0] == "method", call.result)
        elif isinstance(target, ClassRef):
            self._construct(call, target)
        elif isinstance(target, External):
            self._external(call, target.qualname, given)
        elif call.symbol[0] == "method" and method_api(call.symbol[2], call.async_op is not None) is not None:
            # `group.isend(...)` on a value of a program class without such a method (one it
            # inherits from outside the program): the Work API, as on a value of unknown class
            self._external(call, DIST_PREFIX + call.symbol[2], given)
        else:
            self._unknown(call, given)

    def _construct(self, call: PendingCall, cls: ClassRef) -> None:
        """An instance of the class: its token is the call's result; the arguments go to __init__
        (wherever it is defined) or to the record's fields."""
        g = self.g
        token = frozenset({g.node((INSTANCE, cls))})
        g.link(token, call.result)
        info = self.program.class_info(cls)
        init = self.program.method(cls, "__init__")
        if init is not None:
            args = Args(call.args.positional, call.args.keywords, token)
            link_call(g, init.mid, init.info, args, replace(call.site, dropped=False), True)
        elif info is not None and info.record:
            for i, values in enumerate(call.args.positional[: len(info.fields)]):
                self._field(call, cls, info.fields[i], values)
            for key, values in call.args.keywords:
                if key is not None:
                    self._field(call, cls, key, values)
        if info is not None and info.tuple_like:
            g.link(call.args.given, call.result)

    def _field(self, call: PendingCall, cls: ClassRef, name: str, values: Nodes) -> None:
        node = self.g.node((ATTR, cls, name))
        self.g.link(values, node)
        self.g.note_store(node, _fact(call, f"{cls.name}.{name}"))

    def _external(self, call: PendingCall, qualified: str, given: Nodes) -> None:
        """A call that resolved outside the program: torch.distributed's API (an origin), a wait,
        a pass-through, or code that may keep what it is given."""
        g = self.g
        api = qualified[len(DIST_PREFIX) :] if qualified.startswith(DIST_PREFIX) else None
        condition: tuple[int, ...] | None = None
        if api in COLLECTIVES and call.async_op is not None:
            condition = None if -1 in call.async_op else tuple(call.async_op)
            api = f"{api}(async_op=True)"
        elif api not in P2P_METHODS:
            api = None
        if api is not None:
            g.link([g.origin_at(call.site, api, call.tensor, condition)], call.result)
            return
        last = qualified.rsplit(".", 1)[-1]
        if last in WAIT_FUNCTIONS:
            fact = _fact(call, qualified)
            for n in given:
                g.waits.setdefault(n, fact)
        elif qualified in PASS_THROUGH_QUALIFIED:
            g.link(given, call.result)
        elif not (qualified.startswith(("torch.", "logging.")) or last in INERT_CALLS):
            g.escape(given, f"passed to {qualified}()")
            g.link(g.unknown(), call.result)

    def _unknown(self, call: PendingCall, given: Nodes) -> None:
        name = _last_name(call.symbol)
        g = self.g
        receiver = call.args.receiver
        if name == "wait":
            fact = _fact(call, call.site.text)
            for n in receiver:
                g.waits.setdefault(n, fact)
            return
        if name in STORE_METHODS:
            g.put(given, receiver, _fact(call, call.site.text.rsplit(".", 1)[0]))
            return
        if name in READ_METHODS:
            g.take(receiver, call.result)
            return
        if name in INERT_CALLS:
            return
        g.escape(given, f"passed to {call.site.text}()")
        g.link(receiver | g.unknown(), call.result)


def _touches(call: PendingCall, relevant: bytearray) -> bool:
    # what it is given may hold a Work; `async_op=` or a Work API's name (behind a re-export)
    # may make it one
    name = _last_name(call.symbol)
    if call.symbol[0] == "method" and name in PG_WORK_METHODS:
        return True  # a ProcessGroup's method on a typed value: a Work if the class is one
    return call.args.touches(relevant) or call.async_op is not None or name in P2P_METHODS


def _fact(call: PendingCall, text: str) -> Fact:
    site = call.site
    return Fact(site.mid, site.span.line, site.span.col, text, site.function)


def _without_last(symbol: tuple) -> tuple:
    if symbol[0] == "dotted":
        return ("dotted", symbol[1].rsplit(".", 1)[0])
    if symbol[0] == "in":
        return ("in", symbol[1], symbol[2][:-1])
    return symbol


def _last_name(symbol: tuple) -> str:
    if symbol[0] == "dotted":
        return symbol[1].rsplit(".", 1)[-1]
    if symbol[0] == "in":
        return symbol[2][-1]
    if symbol[0] == "method":
        return symbol[2]
    return ""


__all__ = ["Linker", "NOTHING"]
