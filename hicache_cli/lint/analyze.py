"""Build one module's ModuleFlow: walk every statement once, in every scope, recording the
Works created (origins), the edges values travel along, and what is done to each node."""

from __future__ import annotations

import ast
from collections.abc import Iterable

from hicache_cli.lint.apis import (
    COLLECTIVES,
    INERT_CALLS,
    P2P_APIS,
    P2P_METHODS,
    PASS_THROUGH,
    PASS_THROUGH_QUALIFIED,
    READ_METHODS,
    STORE_METHODS,
    WAIT_FUNCTIONS,
)
from hicache_cli.lint.flow import (
    ATTR,
    GLOBAL,
    LOCAL,
    MODULE,
    PERSISTENT,
    RETURN,
    Drain,
    Fact,
    ModuleFlow,
    Node,
    Origin,
)
from hicache_cli.lint.names import DIST, ClassInfo, Function, ModuleIndex, is_static
from hicache_cli.lint.scopes import Loop, Scope, fresh_bindings, is_private, own_nodes

DIST_PREFIX = DIST + "."

Nodes = frozenset[Node]
NOTHING: Nodes = frozenset()


def analyze(tree: ast.Module, index: ModuleIndex) -> ModuleFlow:
    builder = _Builder(index)
    builder.module(tree)
    flow = builder.flow
    # An attribute no class here assigns belongs to code this module cannot see (another
    # module's object, a base class elsewhere, a mixin's host): what is kept there is theirs.
    for node, facts in flow.stores.items():
        if node[0] == ATTR and node[1] not in index.owned:
            why = f"kept in {facts[0].text}, an attribute no class in this module assigns"
            flow.escapes.setdefault(node, []).append(Fact(facts[0].line, why, facts[0].function))
    return flow


class _Builder:
    """One walk over a module: scopes as it enters them, facts and edges as it meets them."""

    def __init__(self, index: ModuleIndex) -> None:
        self.index = index
        self.flow = ModuleFlow()
        self.scope = Scope(MODULE, "module", None)
        self.loops: list[Loop] = []
        self.finally_depth = 0

    # --- scopes -------------------------------------------------------------------------------

    def module(self, tree: ast.Module) -> None:
        self.flow.functions[MODULE] = tree
        self.scope.collect(tree.body, [], self._api_value)
        self.body(tree.body)

    def _api_value(self, expr: ast.expr) -> str | None:
        """`torch.distributed.isend if async_send else torch.distributed.send` -> isend."""
        leaves = [expr.body, expr.orelse] if isinstance(expr, ast.IfExp) else [expr]
        for leaf in leaves:
            qualified = self.index.qualname(leaf)
            if qualified in P2P_APIS:
                return P2P_APIS[qualified]
        return None

    def function(self, fn: Function, class_name: str | None) -> None:
        for expr in [*fn.decorator_list, *fn.args.defaults, *(d for d in fn.args.kw_defaults if d)]:
            self.ev(expr)
        enclosing = self.scope
        prefix = class_name or ("" if enclosing.kind == "module" else enclosing.qualname)
        qualname = f"{prefix}.{fn.name}" if prefix else fn.name
        params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]]
        params += [a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None]
        positional = [*fn.args.posonlyargs, *fn.args.args]
        self_name = positional[0].arg if class_name and positional and not is_static(fn) else None
        scope = Scope(qualname, "function", enclosing, self_name=self_name)
        scope.collect(fn.body, params, self._api_value)
        self.flow.functions[qualname] = fn
        # A public function's (or a closure's) return value goes to callers we cannot see.
        if enclosing.kind == "function" or not is_private(fn.name):
            self._note(self.flow.escapes, [(RETURN, qualname)], fn.lineno, f"returned by {qualname}")
        saved = self.scope, self.loops, self.finally_depth
        self.scope, self.loops, self.finally_depth = scope, [], 0
        self.body(fn.body)
        self.scope, self.loops, self.finally_depth = saved

    def class_def(self, node: ast.ClassDef) -> None:
        for expr in [*node.bases, *node.decorator_list, *(k.value for k in node.keywords)]:
            self.ev(expr)
        saved = self.scope
        self.scope = Scope(node.name, "class", saved)
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                self.scope = saved
                self.function(item, node.name)
                self.scope = Scope(node.name, "class", saved)
            else:
                self.stmt(item)
        self.scope = saved

    def name_node(self, name: str) -> Node:
        return self.scope.node_for(name)

    def is_self(self, expr: ast.expr) -> bool:
        return self.scope.is_self(expr)

    # --- recording ----------------------------------------------------------------------------

    def _note(
        self, table: dict[Node, list[Fact]], nodes: Iterable[Node], line: int, text: str, timeout: bool = False
    ) -> None:
        fact = Fact(line, text, self.scope.qualname, timeout)
        for node in nodes:
            table.setdefault(node, []).append(fact)

    def link(self, sources: Nodes, target: Node) -> None:
        for source in sources:
            if source != target:
                self.flow.edges.setdefault(source, set()).add(target)

    def store(self, values: Nodes, targets: Nodes, line: int, text: str, grows: bool) -> None:
        """`values` may now be kept in `targets`; `grows`: appended to rather than replaced."""
        if not values:
            return
        for target in targets:
            if values <= {target}:  # `self.work_list = self.work_list[count:]` keeps, stores nothing new
                continue
            self.link(values, target)
            if target[0] in PERSISTENT:
                self._note(self.flow.stores, [target], line, text)
            elif target[0] == LOCAL and grows and target not in self.flow.grows:
                # A local list appended to in a `while` loop that never starts it afresh grows
                # for as long as the loop runs: a scheduler's loop is one.
                name = target[1].rsplit(":", 1)[1]
                loop = next((lp for lp in reversed(self.loops) if lp.is_while and name not in lp.fresh), None)
                if loop is not None:
                    why = f"{text}, a local that grows on every pass of the while loop at line {loop.line}"
                    self.flow.grows[target] = Fact(line, why, self.scope.qualname)

    def escape(self, nodes: Nodes, line: int, why: str) -> None:
        self._note(self.flow.escapes, nodes, line, why)

    def new_origin(self, api: str, call: ast.Call, dropped: bool, element: str | None = None) -> Nodes:
        tensor = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "tensor"), None)
        end = getattr(call, "end_lineno", None) or call.lineno
        origin = Origin(len(self.flow.origins), api, call.lineno, end, self.scope.qualname, tensor, dropped, element)
        self.flow.origins.append(origin)
        return frozenset({origin.node})

    # --- statements ---------------------------------------------------------------------------

    def body(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            self.stmt(stmt)

    def stmt(self, node: ast.stmt) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self.function(node, None)
        elif isinstance(node, ast.ClassDef):
            self.class_def(node)
        elif isinstance(node, ast.Assign):
            self.assign(node.targets, node.value)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self.assign([node.target], node.value)
        elif isinstance(node, ast.AugAssign):
            values = self.ev(node.value)
            self.store(values, self.ev(node.target), node.lineno, ast.unparse(node.target), grows=True)
        elif isinstance(node, ast.For | ast.AsyncFor):
            self.for_loop(node)
        elif isinstance(node, ast.While):
            self.ev(node.test)
            self.loops.append(Loop(node.lineno, True, fresh_bindings(node)))
            self.body(node.body)
            self.loops.pop()
            self.body(node.orelse)
        elif isinstance(node, ast.If):
            self.ev(node.test)
            self.body(node.body)
            self.body(node.orelse)
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                held = self.ev(item.context_expr)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, held, node.lineno)
            self.body(node.body)
        elif isinstance(node, ast.Try | getattr(ast, "TryStar", ast.Try)):
            self.try_stmt(node)  # type: ignore[arg-type]
        elif isinstance(node, ast.Return):
            if node.value is not None:
                values = self.ev(node.value)
                if self.scope.kind == "function":
                    self.link(values, (RETURN, self.scope.qualname))
        elif isinstance(node, ast.Expr):
            if isinstance(node.value, ast.Call):
                self.call(node.value, statement=True)
            else:
                self.ev(node.value)
        elif isinstance(node, ast.Match):
            self.ev(node.subject)
            for case in node.cases:
                if case.guard is not None:
                    self.ev(case.guard)
                self.body(case.body)
        else:  # raise, assert, delete, import, global, pass, break, continue
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.ev(child)

    def try_stmt(self, node: ast.Try) -> None:
        guarded = bool(node.finalbody)
        self.finally_depth += guarded
        self.body(node.body)
        for handler in node.handlers:
            if handler.type is not None:
                self.ev(handler.type)
            self.body(handler.body)
        self.body(node.orelse)
        self.finally_depth -= guarded
        self.body(node.finalbody)

    def assign(self, targets: list[ast.expr], value: ast.expr) -> None:
        target = targets[0]
        if (
            len(targets) == 1
            and isinstance(target, ast.Tuple | ast.List)
            and isinstance(value, ast.Call)
            and self.work_api(value) == "batch_isend_irecv"
            and all(isinstance(t, ast.Name) for t in target.elts)
        ):
            # `send_work, recv_work = dist.batch_isend_irecv(ops)`: one origin per element
            self.args(value)
            for elt in target.elts:
                assert isinstance(elt, ast.Name)
                origin = self.new_origin("batch_isend_irecv", value, self.scope.loads[elt.id] == 0, elt.id)
                self.bind(elt, origin, value.lineno)
            return
        if len(targets) == 1 and isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Tuple | ast.List):
            if len(target.elts) == len(value.elts) and not any(isinstance(e, ast.Starred) for e in value.elts):
                for t, v in zip(target.elts, value.elts, strict=True):  # `pending, self.pending = self.pending, []`
                    self.bind(t, self.ev(v), value.lineno)
                return
        dropped = isinstance(target, ast.Name) and len(targets) == 1 and self.scope.loads[target.id] == 0
        if isinstance(value, ast.Call) and dropped and self.work_api(value) is not None:
            values = self.call(value, statement=True)
        else:
            values = self.ev(value)
        for t in targets:
            self.bind(t, values, value.lineno)

    def bind(self, target: ast.expr, values: Nodes, line: int) -> None:
        if isinstance(target, ast.Name):
            self.store(values, frozenset({self.name_node(target.id)}), line, target.id, grows=False)
        elif isinstance(target, ast.Attribute):
            holders = {(ATTR, target.attr)} | (NOTHING if self.is_self(target.value) else self.ev(target.value))
            self.store(values, frozenset(holders), line, ast.unparse(target), grows=False)
        elif isinstance(target, ast.Subscript):
            self.ev(target.slice)
            self.store(values, self.ev(target.value), line, ast.unparse(target.value), grows=True)
        elif isinstance(target, ast.Tuple | ast.List):
            for elt in target.elts:
                self.bind(elt, values, line)
        elif isinstance(target, ast.Starred):
            self.bind(target.value, values, line)

    def for_loop(self, node: ast.For | ast.AsyncFor) -> None:
        items = self.ev(node.iter)
        self.bind(node.target, items, node.lineno)
        if isinstance(node.target, ast.Name):
            self.drains_in(node.target.id, node.body, items, node.iter)
        self.loops.append(Loop(node.lineno, False, fresh_bindings(node)))
        self.body(node.body)
        self.loops.pop()
        self.body(node.orelse)

    def drains_in(self, name: str, body: list[ast.AST], items: Nodes, container: ast.expr) -> None:
        for node in own_nodes(body):  # type: ignore[arg-type]
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "wait"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == name
            ):
                timeout = bool(node.args or node.keywords)
                text, where = ast.unparse(container), self.scope.qualname
                self.flow.drains.append(Drain(node.lineno, items, text, where, timeout, self.finally_depth > 0))

    # --- expressions --------------------------------------------------------------------------

    def ev(self, node: ast.expr | None) -> Nodes:
        """What the expression's value may hold: the nodes it reads from, or the origin it creates."""
        if node is None or isinstance(node, ast.Constant):
            return NOTHING
        if isinstance(node, ast.Name):
            return frozenset({self.name_node(node.id)})
        if isinstance(node, ast.Attribute):
            if self.is_self(node.value):
                return frozenset({(ATTR, node.attr)})
            return self.ev(node.value) | {(ATTR, node.attr)}
        if isinstance(node, ast.Subscript):
            self.ev(node.slice)
            return self.ev(node.value)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.IfExp):
            self.ev(node.test)
            return self.ev(node.body) | self.ev(node.orelse)
        if isinstance(node, ast.BinOp):  # `works_a + works_b`; long chains are flattened, not recursed
            parts, todo = [], [node]
            while todo:
                part = todo.pop()
                if isinstance(part, ast.BinOp):
                    todo += [part.right, part.left]
                else:
                    parts.append(part)
            return frozenset().union(*(self.ev(p) for p in parts))
        if isinstance(node, ast.BoolOp | ast.List | ast.Tuple | ast.Set):
            parts = node.values if isinstance(node, ast.BoolOp) else node.elts
            return frozenset().union(*(self.ev(p) for p in parts))
        if isinstance(node, ast.Dict):
            for key in node.keys:
                self.ev(key)
            return frozenset().union(*(self.ev(v) for v in node.values))
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            return self.comprehension(node)
        if isinstance(node, ast.NamedExpr):
            values = self.ev(node.value)
            self.bind(node.target, values, node.lineno)
            return values
        if isinstance(node, ast.Starred | ast.Await):
            return self.ev(node.value)
        if isinstance(node, ast.Yield | ast.YieldFrom):
            self.escape(self.ev(node.value), node.lineno, "yielded")
            return NOTHING
        if isinstance(node, ast.Lambda):
            self.ev(node.body)  # a wait() inside a callback still waits
            return NOTHING
        for child in ast.iter_child_nodes(node):  # compare, unary, f-strings, slices: read, keep nothing
            if isinstance(child, ast.expr):
                self.ev(child)
        return NOTHING

    def comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> Nodes:
        for gen in node.generators:
            items = self.ev(gen.iter)
            self.bind(gen.target, items, node.lineno)
            for cond in gen.ifs:
                self.ev(cond)
        if isinstance(node, ast.DictComp):
            self.ev(node.key)
            return self.ev(node.value)
        first = node.generators[0]
        if len(node.generators) == 1 and isinstance(first.target, ast.Name):
            self.drains_in(first.target.id, [node.elt], self.ev(first.iter), first.iter)
        return self.ev(node.elt)

    def args(self, call: ast.Call) -> tuple[list[Nodes], dict[str | None, Nodes]]:
        positional = [self.ev(a) for a in call.args]
        keywords = {k.arg: self.ev(k.value) for k in call.keywords}
        return positional, keywords

    def work_api(self, call: ast.Call) -> str | None:
        """The Work-creating API a call is, or None."""
        func = call.func
        qualified = self.index.qualname(func)
        if qualified in P2P_APIS:
            return P2P_APIS[qualified]
        if isinstance(func, ast.Name):
            name = func.id
            if self.scope.alias(name) is not None:
                return self.scope.alias(name)
            own = name in self.index.functions and not (qualified or "").startswith(DIST_PREFIX)
        elif isinstance(func, ast.Attribute):
            name = func.attr
            # A method this module defines under that name is followed as written, not assumed.
            own = qualified is None and name in self.index.methods
            if qualified is None and name in P2P_METHODS and not own and not self._is_imported(func.value):
                return name  # `group.isend(...)`: a wrapper with torch.distributed's name
        else:
            return None
        async_op = any(
            k.arg == "async_op" and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords
        )
        if async_op and name in COLLECTIVES and not own:
            return f"{name}(async_op=True)"
        return None

    def _is_imported(self, expr: ast.expr) -> bool:
        """Whether a receiver starts from an imported name (a module, left to its qualified name)."""
        root = expr
        while isinstance(root, ast.Attribute | ast.Subscript | ast.Call):
            root = root.func if isinstance(root, ast.Call) else root.value
        return isinstance(root, ast.Name) and root.id in self.index.imports.table

    def call(self, node: ast.Call, statement: bool = False) -> Nodes:
        api = self.work_api(node)
        if api is not None:
            self.args(node)
            return self.new_origin(api, node, statement)
        func = node.func
        positional, keywords = self.args(node)
        if isinstance(func, ast.Attribute):
            qualified = self.index.qualname(func)
            if qualified is not None:
                return self.call_qualified(qualified, frozenset().union(*positional, *keywords.values()), node.lineno)
            return self.call_method(node, func.value, func.attr, positional, keywords)
        if isinstance(func, ast.Name):
            return self.call_name(node, func, positional, keywords)
        self.ev(func)
        self.escape(frozenset().union(*positional, *keywords.values()), node.lineno, "passed to a computed callable")
        return NOTHING

    def call_method(
        self,
        node: ast.Call,
        receiver: ast.expr,
        method: str,
        positional: list[Nodes],
        keywords: dict[str | None, Nodes],
    ) -> Nodes:
        """`receiver.method(...)`: this module's own method, or what the method's name means."""
        if self.is_self(receiver) and method in self.index.methods:
            return self.call_own(self.index.methods[method], positional, keywords, bound=True)
        if isinstance(receiver, ast.Name) and receiver.id in self.index.classes:
            owner = self.index.classes[receiver.id]
            if method in owner.methods:
                return self.call_own([(owner.name, owner.methods[method])], positional, keywords, bound=False)
        # On any other receiver, a method some class here defines may be that one (a helper
        # object of this module): its parameters get the arguments, as well as what the name means.
        own = self.index.methods.get(method)
        followed = self.call_own(own, positional, keywords, bound=True) if own else NOTHING
        held = self.ev(receiver)
        given = frozenset().union(*positional, *keywords.values())
        text, line = ast.unparse(receiver), node.lineno
        if method == "wait":
            self._note(self.flow.waits, held, line, text, timeout=bool(node.args or node.keywords))
            return followed
        if method == "is_completed":
            self._note(self.flow.polls, held, line, text)
            return followed
        if method in STORE_METHODS:
            kept = positional[1:] if method in ("insert", "setdefault") else positional
            self.store(frozenset().union(*kept, *keywords.values()), held, line, text, grows=True)
            return followed | held if method == "setdefault" else followed
        if method in READ_METHODS:
            return followed | held
        if method in INERT_CALLS:
            return followed
        if not own:
            self.escape(given, line, f"passed to {text}.{method}()")
        return followed | held

    def call_name(
        self, node: ast.Call, func: ast.Name, positional: list[Nodes], keywords: dict[str | None, Nodes]
    ) -> Nodes:
        """`name(...)`: this module's function or class, an imported function, or a builtin."""
        name, line = func.id, node.lineno
        given = frozenset().union(*positional, *keywords.values())
        module_level = self.name_node(name)[0] == GLOBAL
        if module_level and name in self.index.functions:
            return self.call_own([(None, self.index.functions[name])], positional, keywords, bound=False)
        if module_level and name in self.index.classes:
            return self.construct(self.index.classes[name], positional, keywords, line)
        qualified = self.index.qualname(func)
        if qualified is not None and module_level:
            return self.call_qualified(qualified, given, line)
        if name in WAIT_FUNCTIONS:
            self._note(self.flow.waits, given, line, name)
            return NOTHING
        if name in INERT_CALLS:
            return NOTHING
        if name in PASS_THROUGH:
            return given
        self.escape(given, line, f"passed to {name}()")
        return NOTHING

    def call_qualified(self, qualified: str, given: Nodes, line: int) -> Nodes:
        last = qualified.rsplit(".", 1)[-1]
        if last in WAIT_FUNCTIONS:
            self._note(self.flow.waits, given, line, qualified)
            return NOTHING
        if qualified in PASS_THROUGH_QUALIFIED:
            return given
        if qualified.startswith(("torch.", "logging.")) or last in INERT_CALLS:
            return NOTHING  # torch's own functions and logging keep no Work they are shown
        self.escape(given, line, f"passed to {qualified}()")
        return NOTHING

    def call_own(
        self,
        defs: list[tuple[str | None, Function]],
        positional: list[Nodes],
        keywords: dict[str | None, Nodes],
        bound: bool,
    ) -> Nodes:
        """A call to a function of this module: arguments flow into its parameters."""
        results: set[Node] = set()
        for class_name, fn in defs:
            qualname = f"{class_name}.{fn.name}" if class_name else fn.name
            names = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
            if bound and class_name and not is_static(fn):
                names = names[1:]
            for i, values in enumerate(positional):
                param = names[i] if i < len(names) else (fn.args.vararg.arg if fn.args.vararg else None)
                if param is not None:
                    self.link(values, (LOCAL, f"{qualname}:{param}"))
            known = set(names) | {a.arg for a in fn.args.kwonlyargs}
            for key, values in keywords.items():
                param = key if key in known else (fn.args.kwarg.arg if fn.args.kwarg else None)
                if param is not None:
                    self.link(values, (LOCAL, f"{qualname}:{param}"))
            results.add((RETURN, qualname))
        return frozenset(results)

    def construct(self, cls: ClassInfo, positional: list[Nodes], keywords: dict[str | None, Nodes], line: int) -> Nodes:
        """`Holder(work, tensor)`: into __init__'s parameters, or a dataclass's fields."""
        if "__init__" in cls.methods:
            self.call_own([(cls.name, cls.methods["__init__"])], positional, keywords, bound=True)
        else:
            for i, values in enumerate(positional[: len(cls.fields)]):
                self.store(values, frozenset({(ATTR, cls.fields[i])}), line, f"{cls.name}.{cls.fields[i]}", False)
            for key, values in keywords.items():
                if key is not None:
                    self.store(values, frozenset({(ATTR, key)}), line, f"{cls.name}.{key}", False)
        return frozenset().union(*positional, *keywords.values())  # the instance holds what it was given
