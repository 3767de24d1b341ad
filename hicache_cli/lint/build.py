"""Walk one module's statements once, in every scope, adding to the program's flow graph: the
Works created (origins), the edges values travel along, what is done to each place, and the
calls into other modules, left for the program to resolve (linking)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from contextlib import contextmanager

from hicache_cli.lint.allocations import Allocations, key_tag
from hicache_cli.lint.calls import Calls, PendingCall
from hicache_cli.lint.drains import Drains
from hicache_cli.lint.exprs import Expressions
from hicache_cli.lint.graph import (
    CALL,
    GLOBAL,
    INSTANCE,
    LOCAL,
    RETURN,
    TRUE,
    UNKNOWN,
    Fact,
    Graph,
    KeyTag,
    Nodes,
)
from hicache_cli.lint.modules import FunctionInfo, ModuleInfo, class_info
from hicache_cli.lint.mutations import Mutations
from hicache_cli.lint.naming import Naming
from hicache_cli.lint.program import ClassRef, Program
from hicache_cli.lint.scopes import Loop, Scope, annotation_class

MODULE = "<module>"


class ModuleWalker(Naming, Expressions, Allocations, Calls, Drains, Mutations):
    """One walk over a module: scopes as it enters them, facts and edges as it meets them."""

    def __init__(self, program: Program, graph: Graph, mid: int, info: ModuleInfo, pending: list[PendingCall]) -> None:
        self.program, self.g, self.mid, self.info, self.pending = program, graph, mid, info, pending
        self.scope = Scope(MODULE, "module", None, mid)
        self.loops: list[Loop] = []
        self.finally_depth = 0
        self.coalescing = 0  # inside `with _coalescing_manager(...)`: its collectives hand out no Work
        self.guards: list[Nodes] = []  # `if async_op:` on a parameter whose default is False: what True must reach
        self.methods: dict[str, list[FunctionInfo]] = {}
        for cls in info.classes.values():
            for method in cls.methods.values():
                self.methods.setdefault(method.qualname.rsplit(".", 1)[1], []).append(method)
        self.sent: list[tuple[int, str, int]] = []  # HC003: (origin index, tensor text, end line) in this function
        self.changed: dict[str, list[int]] = {}  # HC003: tensor text -> lines changed in place, this function
        self.rebound: dict[str, list[int]] = {}  # HC003: tensor text -> lines assigned anew, this function

    # --- scopes -------------------------------------------------------------------------------

    def module(self, tree: ast.Module) -> None:
        self.scope.collect(tree.body, [], self._api_value, self.class_key, self.info.name, self.info.is_package)
        self.body(tree.body)
        self._mutations_done()

    def _api_value(self, expr: ast.expr) -> str | None:
        """`torch.distributed.isend if async_send else torch.distributed.send` -> isend."""
        leaves = [expr.body, expr.orelse] if isinstance(expr, ast.IfExp) else [expr]
        for leaf in leaves:
            api = self.api_named(leaf)
            if api in ("isend", "irecv", "batch_isend_irecv"):
                return api
        return None

    def function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, cls: ClassRef | None) -> Scope:
        is_lambda = isinstance(fn, ast.Lambda)
        for expr in [] if is_lambda else fn.decorator_list:  # type: ignore[union-attr]
            self.ev(expr)
        enclosing = self.scope
        name = f"<lambda:{fn.lineno}:{fn.col_offset}>" if is_lambda else fn.name  # type: ignore[union-attr]
        prefix = cls.name if cls is not None else ("" if enclosing.kind == "module" else enclosing.qualname)
        qualname = f"{prefix}.{name}" if prefix else name
        args = fn.args
        params = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
        params += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
        info = (
            FunctionInfo.of(fn, qualname, cls is not None)
            if not is_lambda
            else FunctionInfo(  # type: ignore[arg-type]
                qualname, tuple(a.arg for a in [*args.posonlyargs, *args.args]), (), None, None, False
            )
        )
        self_name = info.positional[0] if info.bound and info.positional else None
        if cls is None and enclosing.kind != "module" and not is_lambda:
            enclosing.functions[fn.name] = info  # type: ignore[union-attr]
        scope = Scope(
            qualname,
            "function",
            enclosing,
            self.mid,
            cls=cls if cls is not None else enclosing.cls,
            self_name=self_name,
        )
        body = [fn.body] if is_lambda else fn.body  # type: ignore[list-item]
        scope.collect(body, params, self._api_value, self.class_key, self.info.name, self.info.is_package)  # type: ignore[arg-type]
        self.g.parameters.update(self.n((LOCAL, self.mid, qualname, p)) for p in params)
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            annotated = annotation_class(arg.annotation)
            if annotated is not None and arg.arg not in scope.types:
                scope.types[arg.arg] = self.class_key(annotated)
            if annotated is not None:
                self.annotated(annotated, self.n((LOCAL, self.mid, qualname, arg.arg)))
        returns = None if is_lambda else annotation_class(fn.returns)  # type: ignore[union-attr]
        if returns is not None:  # `def get_pp_group() -> GroupCoordinator`: what it returns is one
            self.annotated(returns, self.n((RETURN, self.mid, qualname)))
        if cls is not None and self_name is not None and not _is_classmethod(fn):
            # `self` is an instance of its class (and of subclasses, through dispatched calls).
            self.g.link([self.n((INSTANCE, cls))], self.n((LOCAL, self.mid, qualname, self_name)))
        saved = self.scope, self.loops, self.finally_depth, self.sent, self.changed, self.rebound, self.coalescing
        saved_guards, self.guards = self.guards, []
        self.scope, self.loops, self.finally_depth, self.coalescing = scope, [], 0, 0
        self.sent, self.changed, self.rebound = [], {}, {}
        # Defaults flow into their parameters (`async_op=True` reaches what the parameter feeds).
        positional = [*args.posonlyargs, *args.args]
        for arg, default in zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True):
            self.g.link(self._outer(default, enclosing), self.n((LOCAL, self.mid, qualname, arg.arg)))
            if _is_false(default):
                scope.switches.add(arg.arg)
        for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            if kw_default is not None:
                self.g.link(self._outer(kw_default, enclosing), self.n((LOCAL, self.mid, qualname, arg.arg)))
                if _is_false(kw_default):
                    scope.switches.add(arg.arg)
        if is_lambda:
            self.g.link(self.ev(fn.body), self.n((RETURN, self.mid, qualname)))  # type: ignore[arg-type]
        else:
            self.body(fn.body)  # type: ignore[arg-type]
        self._mutations_done()
        self.scope, self.loops, self.finally_depth, self.sent, self.changed, self.rebound, self.coalescing = saved
        self.guards = saved_guards
        self._closure_kept(scope, name, enclosing, fn.lineno)
        return scope

    @contextmanager
    def guarded(self, test: ast.expr) -> Iterator[None]:
        """`if overlap:` / `x if overlap else y` where `overlap` is a parameter defaulting to
        False (Oobleck's `_recv(t, src, async_op=False)`): the Works made there exist only when
        True reaches it, as with `async_op=overlap` itself."""
        guard = None
        if isinstance(test, ast.Name) and test.id in self.scope.switches and self.scope.kind == "function":
            guard = frozenset({self.n((LOCAL, self.mid, self.scope.qualname, test.id))})
            self.guards.append(guard)
        try:
            yield
        finally:
            if guard is not None:
                self.guards.pop()

    def _outer(self, expr: ast.expr, scope: Scope) -> Nodes:
        saved, self.scope = self.scope, scope
        try:
            return self.ev(expr)
        finally:
            self.scope = saved

    def _closure_kept(self, scope: Scope, name: str, enclosing: Scope, line: int) -> None:
        """A closure that outlives its function (returned, stored, passed on, decorated) keeps
        what it captured alive with it: those locals are kept places."""
        if enclosing.kind != "function" or not scope.captured:
            return
        if name.startswith("<lambda") or enclosing.value_loads[name] == 0:
            return  # a lambda is taken to be used where it is written (a documented limit)
        for key in scope.captured:
            if key[2] == enclosing.qualname:
                node = self.n(key)
                why = f"{key[3]}, captured by {scope.qualname}, which outlives {key[2]}"
                self.g.kept.setdefault(node, Fact(self.mid, line, 0, why, scope.qualname))

    def class_def(self, node: ast.ClassDef) -> None:
        for expr in [*node.bases, *node.decorator_list, *(k.value for k in node.keywords)]:
            self.ev(expr)
        ref = ClassRef(self.mid, node.name)
        if self.scope.kind != "module":  # a class inside a function: known to this module only
            ref = ClassRef(self.mid, f"{self.scope.qualname}.{node.name}")
            self.info.classes.setdefault(ref.name, class_info(node))
        saved = self.scope
        self.scope = Scope(node.name, "class", saved, self.mid, cls=ref)
        self.scope.collect(node.body, [], self._api_value, self.class_key, self.info.name, self.info.is_package)
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                self.scope = saved
                self.function(item, ref)
                self.scope = Scope(node.name, "class", saved, self.mid, cls=ref)
            else:
                self.stmt(item)
        self.scope = saved

    def n(self, key: tuple) -> int:
        return self.g.node(key)

    def fact(self, node: ast.AST, text: str) -> Fact:
        return Fact(self.mid, getattr(node, "lineno", 0), getattr(node, "col_offset", 0), text, self.scope.qualname)

    # --- recording ----------------------------------------------------------------------------

    def store(
        self,
        values: Nodes,
        targets: Nodes,
        where: ast.AST,
        text: str,
        grows: bool,
        key: KeyTag = None,
        refill: bool = False,
    ) -> None:
        """`values` may now be kept in `targets`: bound to them, or (`grows`) put into the
        containers they hold (`x.append(v)`, `x[key] = v`)."""
        if not values:
            return
        if grows:
            self.g.put(values, targets, self.fact(where, text), key, refill)
        for target in targets:
            if values <= {target} or self.g.keys[target][0] == UNKNOWN:  # `self.works = self.works[n:]`
                continue
            if not grows:
                self.g.link(values, target)
                self.g.note_store(target, self.fact(where, text))
            elif self.g.keys[target][0] == LOCAL and target not in self.g.kept:
                self._grows_in_loop(target, where, text)

    def _grows_in_loop(self, target: int, where: ast.AST, text: str) -> None:
        # A local list appended to in a `while` loop that never starts it afresh grows for as
        # long as the loop runs: a scheduler's loop is one.
        name = self.g.keys[target][3]
        loop = next((lp for lp in reversed(self.loops) if lp.is_while and name not in lp.fresh), None)
        if loop is None:
            return
        bound = self.scope.bounded.get(name)
        if bound is None:
            why = f"{text}, a local that grows on every pass of the while loop at line {loop.line}"
        else:  # still kept (it outlives each pass) and still never waited, but it does not grow
            why = (
                f"{text}, a deque(maxlen={bound}) filled on every pass of the while loop at line {loop.line}, "
                f"which drops its oldest Works unwaited"
            )
        self.g.kept[target] = self.fact(where, why)

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
            annotated = annotation_class(node.annotation)
            if annotated is not None and isinstance(node.target, ast.Name | ast.Attribute):
                self.annotated(annotated, next(iter(self.ev(node.target)), -1))
        elif isinstance(node, ast.AugAssign):
            values = self.ev(node.value)  # `works += more`: more's elements go into works
            added = frozenset({self.take(values)}) if values else values
            self.store(added, self.ev(node.target), node, ast.unparse(node.target), grows=True)
            self._changed(node.target, node.lineno)
        elif isinstance(node, ast.For | ast.AsyncFor):
            self.for_loop(node)
        elif isinstance(node, ast.While):
            self.ev(node.test)
            self.loops.append(Loop(node.lineno, True, node))
            self.while_drains(node)
            self.body(node.body)
            self.loops.pop()
            self.body(node.orelse)
        elif isinstance(node, ast.If):
            self.ev(node.test)
            with self.guarded(node.test):
                self.body(node.body)
            self.body(node.orelse)
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                held = self.ev(item.context_expr)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, held, node)
            # torch's _coalescing_manager queues the collectives called inside it; each hands
            # out no Work of its own (the manager's `cm.wait()` waits them all)
            coalescing = any(_is_coalescing(item.context_expr) for item in node.items)
            self.coalescing += coalescing
            self.body(node.body)
            self.coalescing -= coalescing
        elif isinstance(node, ast.Try | getattr(ast, "TryStar", ast.Try)):
            self.try_stmt(node)  # type: ignore[arg-type]
        elif isinstance(node, ast.Return):
            if node.value is not None and self.scope.kind == "function":
                ret = self.n((RETURN, self.mid, self.scope.qualname))
                held = self.ev(node.value)
                if self.guards:  # `if overlap: return out, handles`: the Works come back on a switch
                    switched = self.n((RETURN, self.mid, self.scope.qualname, "if", node.lineno))
                    self.g.switched.add(switched)
                    self.g.link(held, switched)
                    self.g.link([switched], ret)
                else:
                    self.g.link(held, ret)
                if (
                    not self.guards
                    and isinstance(node.value, ast.Tuple)
                    and not any(isinstance(e, ast.Starred) for e in node.value.elts)
                ):
                    # `return out, work`: each element its own place, so `out, work = f()` keeps
                    # them apart at each call (the call's own elements: link.py)
                    (token,) = held
                    for i in range(len(node.value.elts)):
                        element = self.n((RETURN, self.mid, self.scope.qualname, i))
                        self.g.link([self.g.content(token, i)[0]], element)
            elif node.value is not None:
                self.ev(node.value)
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
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                if isinstance(target, ast.Subscript):  # `del self.pending[step]`: dropped from it
                    self.ev(target.slice)
                    self.g.reaped.update(self.ev(target.value))
        else:  # raise, assert, import, global, pass, break, continue
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
            and self.api_named(value.func) == "batch_isend_irecv"
            and all(isinstance(t, ast.Name) for t in target.elts)
        ):
            # `send_work, recv_work = dist.batch_isend_irecv(ops)`: one origin per element
            self.args(value)
            for elt in target.elts:
                assert isinstance(elt, ast.Name)
                origin = self.new_origin("batch_isend_irecv", value, self.scope.loads[elt.id] == 0, elt.id)
                self.bind(elt, origin, value)
            return
        if len(targets) == 1 and isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Tuple | ast.List):
            if len(target.elts) == len(value.elts) and not any(isinstance(e, ast.Starred) for e in value.elts):
                for t, v in zip(target.elts, value.elts, strict=True):  # `pending, self.pending = self.pending, []`
                    self.bind(t, self.ev(v), value)
                return
        dropped = isinstance(target, ast.Name) and len(targets) == 1 and self.scope.loads[target.id] == 0
        values = self.call(value, statement=True) if isinstance(value, ast.Call) and dropped else self.ev(value)
        if len(targets) == 1 and self._may_keep(target) and _mentions(value, target):  # type: ignore[arg-type]
            # `self.works = [w for w in self.works if ...]`, `self.works = self.works[n:]`: a reaper
            self.g.reaped.update(self.ev(target))
        if len(targets) == 1 and isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Call):
            elements = self._elements(values, target)
            if elements is not None:
                for i, (t, element) in enumerate(zip(target.elts, elements, strict=True)):
                    self.g.take(values, element, index=i, opened=False)
                    self.bind(t, frozenset({element}), value)
                return
        for t in targets:
            self.bind(t, values, value)
            self._rebound(t, value)

    def _elements(self, values: Nodes, target: ast.Tuple | ast.List) -> list[int] | None:
        """`out, work = f()` where f is a function of the program: one node per element, which
        the callee's `return out, work` feeds element by element (see link.py)."""
        if len(values) != 1 or any(isinstance(e, ast.Starred) for e in target.elts):
            return None
        (result,) = values
        if self.g.keys[result][0] != CALL:
            return None
        elements = [self.n((CALL, "element", result, i)) for i in range(len(target.elts))]
        self.g.elements[result] = tuple(elements)
        return elements

    def _may_keep(self, target: ast.expr) -> bool:
        """An attribute, or a module-level name read somewhere here: a place that can outlive a call."""
        if isinstance(target, ast.Attribute):
            return True
        return (
            isinstance(target, ast.Name)
            and self.scope.loads[target.id] > 0
            and self.scope.node_for(target.id)[0] == GLOBAL
        )

    def bind(self, target: ast.expr, values: Nodes, where: ast.AST) -> None:
        if isinstance(target, ast.Name):
            node = self.n(self.name_key(target.id))
            if self.scope.kind == "class":
                self.g.assigned.add(node)  # a class-level name: the class's own attribute
            self.store(values, frozenset({node}), where, target.id, grows=False)
        elif isinstance(target, ast.Attribute):
            holder = self.attr_node(target)
            self.g.assigned.add(holder)
            owner = self.scope.self_scope(target.value.id) if isinstance(target.value, ast.Name) else None
            if owner is not None and isinstance(owner.cls, ClassRef) and owner.cls.mid == self.mid:
                if (cls := self.info.classes.get(owner.cls.name)) is not None:
                    cls.declared.add(target.attr)  # `self.x = ...`: the class's own attribute
            self.store(values, frozenset({holder}), where, ast.unparse(target), grows=False)
        elif isinstance(target, ast.Subscript):
            self.ev(target.slice)
            refill = isinstance(target.slice, ast.Slice)
            key = key_tag(target.slice) if not refill else None
            self.store(values, self.ev(target.value), where, ast.unparse(target.value), True, key, refill)
            self._changed(target, getattr(where, "lineno", 0))
        elif isinstance(target, ast.Tuple | ast.List):
            self.unpack(target, values, where)
        elif isinstance(target, ast.Starred):
            self.bind(target.value, values, where)

    def for_loop(self, node: ast.For | ast.AsyncFor) -> None:
        items = self.ev(node.iter)
        renamed = self.own_loop_names(node.target, node)
        self.bind(node.target, frozenset({self.take(items)}) if items else items, node)
        self.for_drains(node, items)
        self.loops.append(Loop(node.lineno, False, node))
        self.body(node.body)
        self.loops.pop()
        self.body(node.orelse)
        self.end_loop_names(renamed)

    def own_loop_names(self, target: ast.expr, loop: ast.AST) -> list[tuple[str, str | None]]:
        """Give the loop's variables places of their own while it is walked (Scope.loop_names)."""
        scope = self.scope
        if scope.kind != "function":
            return []
        names = [n.id for n in ast.walk(target) if isinstance(n, ast.Name) and n.id in scope.loop_names()]
        saved = [(name, scope.renamed.get(name)) for name in names]
        for name in names:
            scope.renamed[name] = f"{name}@{loop.lineno}:{loop.col_offset}"
        return saved

    def end_loop_names(self, saved: list[tuple[str, str | None]]) -> None:
        for name, before in reversed(saved):
            if before is None:
                self.scope.renamed.pop(name, None)
            else:
                self.scope.renamed[name] = before

    # --- drains (HC002): every Work of a container waited in turn ------------------------------


def _mentions(value: ast.expr, target: ast.Name | ast.Attribute) -> bool:
    """Whether `value` reads what `target` names (`self.works` in `[w for w in self.works if ...]`)."""
    if isinstance(target, ast.Name):
        return any(isinstance(n, ast.Name) and n.id == target.id for n in ast.walk(value))
    text = None
    for n in ast.walk(value):
        if isinstance(n, ast.Attribute) and n.attr == target.attr:
            text = text or ast.unparse(target)
            if ast.unparse(n) == text:
                return True
    return False


def _is_false(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and expr.value in (False, None)


def _is_classmethod(fn: ast.AST) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "classmethod" for d in getattr(fn, "decorator_list", []))


def _is_coalescing(expr: ast.expr) -> bool:
    """`_coalescing_manager(group, ...)`, under any import (`dist._coalescing_manager(...)`)."""
    func = expr.func if isinstance(expr, ast.Call) else None
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    return name == "_coalescing_manager"


__all__ = ["MODULE", "ModuleWalker", "TRUE"]
