"""Scopes: which names a function, class or module binds, what `self` is, which names hold
a Work API chosen at run time, and how a name resolves to a place in the flow graph."""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from hicache_cli.lint.flow import ATTR, GLOBAL, LOCAL, Node


def own_nodes(body: list[ast.stmt]) -> list[ast.AST]:
    """Every node of a body, not descending into nested functions, classes or lambdas (their
    def or lambda node itself is included)."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = list(reversed(body))
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        todo.extend(reversed(list(ast.iter_child_nodes(node))))
    return out


@dataclass
class Scope:
    qualname: str
    kind: str  # module | class | function
    parent: Scope | None
    locals: set[str] = field(default_factory=set)
    declared_global: set[str] = field(default_factory=set)
    self_name: str | None = None
    aliases: dict[str, str] = field(default_factory=dict)  # local name -> the Work API it may hold
    loads: Counter[str] = field(default_factory=Counter)

    def collect(self, body: list[ast.stmt], params: list[str], api_of: Callable[[ast.expr], str | None]) -> None:
        """The names this scope binds (assigned in it), its reads, its `global` declarations,
        and names assigned a Work API (`send = dist.isend if a else dist.send`)."""
        self.locals.update(params)
        for node in own_nodes(body):
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Store):
                    self.locals.add(node.id)
                else:
                    self.loads[node.id] += 1
            elif isinstance(node, ast.Global | ast.Nonlocal):
                self.declared_global.update(node.names)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.locals.add(node.name)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                self.locals.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self.locals.add(node.name)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                api = api_of(node.value)
                if api is not None:
                    self.aliases[node.targets[0].id] = api
        self.locals -= self.declared_global

    def node_for(self, name: str) -> Node:
        """The place a name stands for here: a function's local, a class attribute (in a class
        body), else a module-level name. `nonlocal` names resolve in the enclosing function."""
        scope: Scope | None = self
        if self.kind == "class":
            return (ATTR, name)
        while scope is not None:
            if name in scope.declared_global:
                return (GLOBAL, name)
            if scope.kind == "function" and name in scope.locals:
                return (LOCAL, f"{scope.qualname}:{name}")
            scope = scope.parent
        return (GLOBAL, name)

    def is_self(self, expr: ast.expr) -> bool:
        """`self` (or `cls`) of the method this code is in, also seen from a closure inside it."""
        if not isinstance(expr, ast.Name):
            return False
        scope: Scope | None = self
        while scope is not None:
            if scope.kind == "function" and expr.id in scope.locals:
                return scope.self_name == expr.id
            scope = scope.parent
        return False

    def alias(self, name: str) -> str | None:
        """The Work API a name was assigned, seen from here; None when a closer scope rebinds it."""
        scope: Scope | None = self
        while scope is not None:
            if name in scope.aliases:
                return scope.aliases[name]
            if scope.kind == "function" and name in scope.locals:
                return None
            scope = scope.parent
        return None


@dataclass
class Loop:
    line: int
    is_while: bool
    fresh: set[str]  # names bound inside it to something new (not derived from themselves)


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _names_in(expr: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}


def fresh_bindings(loop: ast.While | ast.For | ast.AsyncFor) -> set[str]:
    """Names a loop's body binds to something new: `works = []` is fresh, `pending = [w for w
    in pending if ...]` is not (it keeps what the name held)."""
    fresh: set[str] = set()
    for node in own_nodes(loop.body):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            used = _names_in(node.value)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            fresh |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name) and n.id not in used}
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
            fresh |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
    return fresh
