"""Expressions and calls, for the module walker: what a value may hold, which calls create
Works, and where a call's arguments and result go - into a function of this module, into one
of another module (left for the program to resolve: a PendingCall), or into code it cannot see."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hicache_cli.lint.allocations import COPIES, COPIES_QUALIFIED, DICT_MAKERS, EMPTY_QUALIFIED
from hicache_cli.lint.apis import (
    COLLECTIVES,
    INERT_CALLS,
    P2P_METHODS,
    PASS_THROUGH,
    PASS_THROUGH_QUALIFIED,
    PG_FACTORIES,
    PG_WORK_METHODS,
    READ_METHODS,
    STORE_METHODS,
    WAIT_FUNCTIONS,
    method_api,
)
from hicache_cli.lint.config import DIST
from hicache_cli.lint.graph import (
    ATTR,
    CALL,
    INSTANCE,
    LOCAL,
    NOTHING,
    ORIGIN,
    RETURN,
    Args,
    CallSite,
    Fact,
    Graph,
    MethodCall,
    Nodes,
    Origin,
    Site,
    Span,
    ValueCall,
)
from hicache_cli.lint.modules import FunctionInfo
from hicache_cli.lint.program import ClassRef

if TYPE_CHECKING:
    from hicache_cli.lint.build import ModuleWalker

DIST_PREFIX = DIST + "."
REAP_METHODS = frozenset({"remove", "pop", "popleft", "popitem", "clear", "discard"})
Keywords = dict[str | None, Nodes]


@dataclass(slots=True)
class PendingCall:
    """A call into another module of the program (or through a class the program resolves):
    linked once the program knows what it calls."""

    site: Site
    symbol: tuple  # ("dotted", "pkg.mod.f") | ("in", mid, ("name", ...)) | ("method", ClassKey, "m")
    args: Args  # the receiver: what a method's receiver holds (the result holds it when nothing is known)
    result: int  # the call's result node
    tensor: str | None
    async_op: Nodes | None  # what `async_op=` holds; None: not given
    done: bool = False


class Calls:
    """Mixed into ModuleWalker: which calls create Works, and where a call's arguments and
    result go."""

    def new_origin(
        self: ModuleWalker,
        api: str,
        call: ast.Call,
        dropped: bool,
        element: str | None = None,
        condition: tuple[int, ...] | None = None,
    ) -> Nodes:
        if condition is None and self.guards and api in ("isend", "irecv", "batch_isend_irecv"):
            condition = tuple(n for guard in self.guards for n in guard)
        if self.coalescing and api.endswith("(async_op=True)"):
            self.g.no_work.append((self.mid, Span.of(call), api))
            return NOTHING  # queued by the coalescing manager around it: no Work (build.py)
        tensor = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "tensor"), None)
        index = len(self.g.origins)
        node = self.n((ORIGIN, index))
        # the tensor as written: only a dropped Work's messages name it (HC003, HC004)
        text = ast.unparse(tensor) if dropped and isinstance(tensor, ast.Name | ast.Attribute) else None
        origin = Origin(
            node,
            api,
            self.mid,
            Span.of(call),
            self.scope.qualname,
            text,
            dropped,
            element,
            condition,
            _group_text(call),
        )
        self.g.origins.append(origin)
        if api == "isend" and dropped and text is not None:
            self.sent.append((index, text, origin.span.end_line))
        return frozenset({node})

    def call(self: ModuleWalker, node: ast.Call, statement: bool = False) -> Nodes:
        func = node.func
        symbol = self.symbol(func) if isinstance(func, ast.Name | ast.Attribute) else None
        if isinstance(func, ast.Name) and symbol is None and self.scope.alias(func.id) is not None:
            self.args(node)
            return self.new_origin(self.scope.alias(func.id) or "", node, statement)  # `send = dist.isend if ...`
        positional, keywords = self.args(node)
        for k in node.keywords:
            if k.arg == "out":  # HC003: `torch.add(a, b, out=t)` changes t in place
                self._changed(k.value, node.lineno)
        given = frozenset().union(*positional, *keywords.values())
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        async_op = _async_op(node, keywords)
        if symbol is None:
            if isinstance(func, ast.Attribute):
                if (api := self._method_api(func, name, async_op)) is not None:
                    return self.new_origin(api, node, statement, condition=_condition(async_op))
                self._in_place(func, node)
                return self.call_method(node, func.value, name, positional, keywords, statement)
            callee = self.ev(func)
            if name in COLLECTIVES and async_op is not None:
                return self.new_origin(f"{name}(async_op=True)", node, statement, condition=_condition(async_op))
            # a call of a value: of each function it may hold (containers.py), or, when it holds
            # none the analysis knows, of code it cannot see (a callback)
            result = self.n((CALL, "v", len(self.g.value_calls)))
            tensor = node.args[0] if node.args else None
            self.g.value_calls.append(
                ValueCall(
                    tuple(callee),
                    Args(tuple(positional), tuple(keywords.items())),
                    result,
                    self.site(node, ast.unparse(func), statement),
                    async_op,
                    ast.unparse(tensor) if statement and isinstance(tensor, ast.Name | ast.Attribute) else None,
                )
            )
            return frozenset({result})
        kind = symbol[0]
        if kind in ("dotted", "in") and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute):
            if name in STORE_METHODS | READ_METHODS | INERT_CALLS:  # `Backend.ongoing_reqs.append(r)`
                return self.call_method(node, func.value, name, positional, keywords)
        if kind == "ext":
            return self.call_external(symbol[1], node, statement, given, async_op, positional)
        if kind == "own_func":
            return self.call_own(symbol[1], positional, keywords, node, statement, name, bound=False)
        if kind == "own_method":
            return self.call_own(symbol[1], positional, keywords, node, statement, ast.unparse(func), bound=False)
        if kind == "closure":
            found = self.scope.function(symbol[1])
            assert found is not None
            return self.call_own(found[1], positional, keywords, node, statement, name, bound=False)
        if kind == "own_class":
            return self.construct(symbol[1], positional, keywords, node, statement)
        if kind == "builtin":
            return self.call_builtin(name, node, positional, given, keywords)
        # Another module's function, class or method: resolved by the program. Its receiver, if
        # the path turns out to end in a value's method (`Backend.ongoing_reqs.append(...)`).
        receiver = self.ev(func.value) if isinstance(func, ast.Attribute) and kind != "method" else NOTHING
        return self.defer(symbol, node, statement, positional, keywords, receiver, async_op)

    def _method_api(self: ModuleWalker, func: ast.Attribute, name: str, async_op: Nodes | None) -> str | None:
        """`group.isend(...)`, `pg.all_reduce(t, async_op=True)`: a Work API by its name on a
        value, unless this module defines a method of that name (followed as written), or the
        value is of a program class (`chunk: Chunk`; `chunk.reduce(async_op=...)` is then
        `Chunk.reduce`, followed by the linker, and the API only if the class has no such
        method of its own: link.py)."""
        if name in self.methods or self._is_imported(func.value) or self._of_program_class(func.value):
            return None
        return method_api(name, async_op is not None)

    def _of_program_class(self: ModuleWalker, expr: ast.expr) -> bool:
        """A local whose class the program names (a constructor call or an annotation)."""
        return (
            isinstance(expr, ast.Name)
            and self.scope.self_scope(expr.id) is None
            and self.scope.type_of(expr.id) is not None
        )

    def _is_imported(self: ModuleWalker, expr: ast.expr) -> bool:
        root = expr
        while isinstance(root, ast.Attribute | ast.Subscript | ast.Call):
            root = root.func if isinstance(root, ast.Call) else root.value
        return isinstance(root, ast.Name) and self._name_symbol(root.id) not in (None, ("builtin", root.id))

    def _in_place(self: ModuleWalker, func: ast.Attribute, node: ast.Call) -> None:
        """HC003: `t.copy_(x)` (a method ending in `_`) or `out=t` changes t in place."""
        if func.attr.endswith("_") and not func.attr.startswith("_"):
            self._changed(func.value, node.lineno)

    def site(self: ModuleWalker, node: ast.Call, text: str, dropped: bool = False) -> Site:
        return Site(self.mid, Span.of(node), self.scope.qualname, text, dropped, _group_text(node))

    def defer(
        self: ModuleWalker,
        symbol: tuple,
        node: ast.Call,
        statement: bool,
        positional: list[Nodes],
        keywords: Keywords,
        receiver: Nodes,
        async_op: Nodes | None,
    ) -> Nodes:
        """A call that another module (or a class elsewhere) decides: linked by the program."""
        result = self.n((CALL, len(self.g.calls) + len(self.pending), self.mid, node.lineno, node.col_offset))
        tensor = node.args[0] if node.args else None
        self.pending.append(
            PendingCall(
                self.site(node, ast.unparse(node.func), statement),
                symbol,
                Args(tuple(positional), tuple(keywords.items()), receiver),
                result,
                ast.unparse(tensor) if isinstance(tensor, ast.Name | ast.Attribute) else None,
                async_op,
            )
        )
        return frozenset({result})

    def call_external(
        self: ModuleWalker,
        qualified: str,
        node: ast.Call,
        statement: bool,
        given: Nodes,
        async_op: Nodes | None,
        positional: list[Nodes],
    ) -> Nodes:
        if qualified.startswith(DIST_PREFIX):
            api = qualified[len(DIST_PREFIX) :]
            if api in P2P_METHODS:
                return self.new_origin(api, node, statement)
            if api in COLLECTIVES and async_op is not None:
                return self.new_origin(f"{api}(async_op=True)", node, statement, condition=_condition(async_op))
        last = qualified.rsplit(".", 1)[-1]
        if last in COLLECTIVES and async_op is not None and not qualified.startswith(DIST_PREFIX):
            return self.new_origin(f"{last}(async_op=True)", node, statement, condition=_condition(async_op))
        if last in WAIT_FUNCTIONS:
            self.wait_on(given, node, qualified)
            return NOTHING
        if qualified in PG_FACTORIES:
            return self.process_group()
        if qualified in DICT_MAKERS:
            return self.dict_made(node, positional, {})
        if qualified in COPIES_QUALIFIED:
            return self.copy_of(node, positional[:1] if qualified != "itertools.chain" else positional)
        if qualified in EMPTY_QUALIFIED:
            return self.copy_of(node, [])
        if qualified in PASS_THROUGH_QUALIFIED:
            return given
        if qualified.startswith(("torch.", "logging.")) or last in INERT_CALLS:
            return NOTHING  # torch's own functions and logging keep no Work they are shown
        self.g.escape(given, f"passed to {qualified}()")
        return self.g.unknown()

    def call_builtin(
        self: ModuleWalker, name: str, node: ast.Call, positional: list[Nodes], given: Nodes, keywords: Keywords
    ) -> Nodes:
        if name in WAIT_FUNCTIONS:
            self.wait_on(given, node, name)
            return NOTHING
        if name == "dict":
            return self.dict_made(node, positional, keywords)
        if name in ("enumerate", "zip"):
            columns: list[Nodes | None] = [None, *positional[:1]] if name == "enumerate" else list(positional)
            return self.rows_of(node, columns)
        if name == "next" and positional:
            return frozenset({self.take(positional[0])})
        if name in COPIES and name != "filter":
            return self.copy_of(node, positional[:1], "set" if name in ("set", "frozenset") else "list")
        if name in ("map", "filter") and node.args:
            # `filter(lambda w: w.wait(), works)`: the function sees each element.
            fn, items = node.args[0], frozenset().union(*positional[1:])
            if isinstance(fn, ast.Lambda):
                self.lambda_value(fn, items)
            elif isinstance(fn, ast.Name) and (found := self._name_symbol(fn.id)) is not None:
                info = found[1] if found[0] == "own_func" else None
                if found[0] == "closure":
                    info = self.scope.function(fn.id)[1]  # type: ignore[index]
                if info is not None and info.positional:
                    self.g.link(items, self.n((LOCAL, self.mid, info.qualname, info.positional[0])), self.g.params)
                elif found[0] not in ("builtin", "ext"):
                    self.g.escape(items, f"passed to {fn.id}()")
            return self.copy_of(node, positional[1:2]) if name == "filter" else NOTHING
        if name in INERT_CALLS:
            return NOTHING
        if name in PASS_THROUGH:
            return given
        self.g.escape(given, f"passed to {name}()")
        return self.g.unknown()

    def wait_on(self: ModuleWalker, nodes: Nodes, node: ast.AST, text: str) -> Fact:
        fact = self.fact(node, text)
        for n in nodes:
            self.g.waits.setdefault(n, fact)
        return fact

    def call_method(
        self: ModuleWalker,
        node: ast.Call,
        receiver: ast.expr,
        method: str,
        positional: list[Nodes],
        keywords: Keywords,
        statement: bool = False,
    ) -> Nodes:
        """`receiver.method(...)`: a method of self's class or of a local of a known class, or
        what the method's name means on any value."""
        scope = self.scope
        owner = scope.self_scope(receiver.id) if isinstance(receiver, ast.Name) else None
        typed = scope.type_of(receiver.id) if isinstance(receiver, ast.Name) and owner is None else None
        is_super = (
            isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super"
        )
        if is_super and scope.cls is not None:
            owner = scope
        if owner is not None and owner.cls is not None:
            cls = owner.cls
            if method in PG_WORK_METHODS and self.program.is_process_group(cls):
                self.ev(receiver)
                return self.new_origin(f"ProcessGroup.{method}", node, statement)
            method_ref = self.program.method(cls, method) if isinstance(cls, ClassRef) and not is_super else None
            me = NOTHING if is_super else self.ev(receiver)
            if is_super:  # super().m(): the method of this class's bases, on this instance
                me = frozenset({self.n((INSTANCE, cls))}) if isinstance(cls, ClassRef) else NOTHING
            if method_ref is not None and method_ref.mid == self.mid:
                args = Args(tuple(positional), tuple(keywords.items()), me)
                return link_call(self.g, self.mid, method_ref.info, args, self.site(node, f"self.{method}"), True)
            if method not in STORE_METHODS | READ_METHODS | INERT_CALLS or method_ref is not None:
                key = ("super", cls) if is_super else cls  # super().m(): m of the bases, not of cls
                return self.defer(
                    ("method", key, method), node, False, positional, keywords, me, _async_op(node, keywords)
                )
        if typed is not None:
            return self.defer(
                ("method", typed, method),
                node,
                False,
                positional,
                keywords,
                self.ev(receiver),
                _async_op(node, keywords),
            )
        held = self.ev(receiver)
        given = frozenset().union(*positional, *keywords.values())
        text = ast.unparse(receiver)
        special = method in ("wait", "is_completed") or method in STORE_METHODS | READ_METHODS | INERT_CALLS
        result = self.n((CALL, "m", len(self.g.method_calls)))
        args = Args(tuple(positional), tuple(keywords.items()), held)
        self.g.method_calls.append(MethodCall(self.site(node, text, statement), method, args, result, special))
        if method == "wait":
            self.g.method_calls[-1].fact = self.wait_on(held, node, text)
            return frozenset({result})
        if method == "is_completed":
            fact = self.fact(node, text)
            for n in held:
                self.g.polls.setdefault(n, fact)
            self.g.method_calls[-1].fact = fact
            return frozenset({result})
        if method in REAP_METHODS:
            self.g.reaped.update(held)
        if method in STORE_METHODS | READ_METHODS:
            return self.container_method(node, method, held, positional, keywords, text) | {result}
        if method in INERT_CALLS:
            return frozenset({result})
        del given  # the rest is decided once the receiver's classes are known (dispatch.py)
        return frozenset({result})

    def call_own(
        self: ModuleWalker,
        fn: FunctionInfo,
        positional: list[Nodes],
        keywords: Keywords,
        node: ast.Call,
        statement: bool,
        text: str,
        bound: bool,
    ) -> Nodes:
        """A call to a function of this module: arguments flow into its parameters, and its
        return value into this call's own result node."""
        args = Args(tuple(positional), tuple(keywords.items()))
        return link_call(self.g, self.mid, fn, args, self.site(node, text, statement), bound)

    def construct(
        self: ModuleWalker, cls: ClassRef, positional: list[Nodes], keywords: Keywords, node: ast.Call, statement: bool
    ) -> Nodes:
        """`Holder(work, tensor)`: an instance of the class (its token), with what it was given in
        __init__'s parameters or a record's fields. A namedtuple is also a tuple of what it holds."""
        token = self.n((INSTANCE, cls))
        info = self.program.class_info(cls)
        init = self.program.method(cls, "__init__")
        if init is not None and init.mid == self.mid:
            args = Args(tuple(positional), tuple(keywords.items()), frozenset({token}))
            link_call(self.g, self.mid, init.info, args, self.site(node, cls.name), True)
        elif init is not None:
            self.defer(("method", cls, "__init__"), node, False, positional, keywords, frozenset({token}), None)
        elif info is not None:
            for i, values in enumerate(positional[: len(info.fields)]):
                field_node = frozenset({self.n((ATTR, cls, info.fields[i]))})
                self.store(values, field_node, node, f"{cls.name}.{info.fields[i]}", False)
            for key, values in keywords.items():
                if key is not None:
                    self.store(values, frozenset({self.n((ATTR, cls, key))}), node, f"{cls.name}.{key}", False)
        if info is not None and info.tuple_like:
            return frozenset({token}).union(*positional, *keywords.values())
        return frozenset({token})


def link_call(g: Graph, callee_mid: int, fn: FunctionInfo, args: Args, site: Site, bound: bool,
              result: int | None = None) -> Nodes:  # fmt: skip
    """A call of a function of the program: arguments -> its parameters (the receiver -> `self`),
    its return -> this call's result node (a CallSite, so each call can be an origin of its own)."""
    if bound and fn.bound and fn.positional and args.receiver:
        g.link(args.receiver, g.node((LOCAL, callee_mid, fn.qualname, fn.positional[0])), g.params)
    for i, values in enumerate(args.positional):
        param = fn.parameter(i, bound)
        if param is not None and values:
            g.link(values, g.node((LOCAL, callee_mid, fn.qualname, param)), g.params)
    for key, values in args.keywords:
        param = fn.keyword(key)
        if param is not None and values:
            g.link(values, g.node((LOCAL, callee_mid, fn.qualname, param)), g.params)
    if result is None:
        result = g.node((CALL, len(g.calls), site.mid, site.span.line, site.span.col))
    ret = g.node((RETURN, callee_mid, fn.qualname))
    g.link([ret], result, g.returns)
    g.calls.append(CallSite(result, ret, site))
    return frozenset({result})


def _async_op(node: ast.Call, keywords: Keywords) -> Nodes | None:
    """What `async_op=` holds (the True node for a literal True); None when it is not given or
    is a literal other than True."""
    for k in node.keywords:
        if k.arg == "async_op":
            if isinstance(k.value, ast.Constant):
                return keywords[k.arg] if k.value.value is True else None
            return keywords[k.arg] or frozenset({-1})  # an expression nothing flows from: may be True
    return None


def _condition(async_op: Nodes | None) -> tuple[int, ...] | None:
    """None (active) for a literal True or an expression that may be anything; else the nodes
    the True constant must reach."""
    if async_op is None or -1 in async_op:
        return None
    return tuple(async_op)


def _group_text(call: ast.Call) -> str | None:
    """`group=` as written, for HC004's "a later Work on the same group"."""
    return next((ast.unparse(k.value) for k in call.keywords if k.arg == "group"), None)
