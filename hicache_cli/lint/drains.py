"""Drains, for the module walker (HC002): a loop that waits every Work of a container in turn,
in each form real code writes it."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from hicache_cli.lint.graph import Drain, Nodes, Span
from hicache_cli.lint.scopes import own_nodes

if TYPE_CHECKING:
    from hicache_cli.lint.build import ModuleWalker


class Drains:
    """Mixed into ModuleWalker: recording drains as the walk meets them."""

    def drain(self: ModuleWalker, call: ast.Call, items: Nodes, container: ast.expr) -> None:
        timeout = bool(call.args or call.keywords)
        self.g.drains.append(
            Drain(
                self.mid,
                Span.of(call),
                tuple(items),
                ast.unparse(container),
                self.scope.qualname,
                timeout,
                self.finally_depth > 0,
            )
        )

    def for_drains(self: ModuleWalker, node: ast.For | ast.AsyncFor, items: Nodes) -> None:
        """`for w in X: w.wait()`, `for i, w in enumerate(X)`, `for t, w in pairs`, and
        `for i in range(len(X)): X[i].wait()`."""
        names = {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        container = node.iter
        by_index = _range_len(node.iter)
        if by_index is not None and isinstance(node.target, ast.Name):
            container, names = by_index, set()
            index = node.target.id
        for call in own_nodes(node.body):
            receiver = _wait_receiver(call)
            if receiver is None:
                continue
            if isinstance(receiver, ast.Name) and receiver.id in names:
                inner = _unwrapped(container)  # `enumerate(self.works)`: the drain is of self.works
                self.drain(call, items if inner is container else self.ev(inner), inner)  # type: ignore[arg-type]
            elif (
                by_index is not None
                and isinstance(receiver, ast.Subscript)
                and isinstance(receiver.slice, ast.Name)
                and receiver.slice.id == index
                and ast.unparse(receiver.value) == ast.unparse(by_index)
            ):
                self.drain(call, self.ev(by_index), by_index)  # type: ignore[arg-type]

    def while_drains(self: ModuleWalker, node: ast.While) -> None:
        """`while X: X.pop().wait()` (or popleft), also through a name: `w = X.pop(0); w.wait()`."""
        popped: dict[str, ast.expr] = {}
        for stmt in own_nodes(node.body):
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                if (container := _popped_from(stmt.value)) is not None:
                    popped[stmt.targets[0].id] = container
        for call in own_nodes(node.body):
            receiver = _wait_receiver(call)
            container = _popped_from(receiver) if receiver is not None else None
            if container is None and isinstance(receiver, ast.Name):
                container = popped.get(receiver.id)
            if container is not None:
                self.drain(call, self.ev(container), container)  # type: ignore[arg-type]

    # --- HC003: a tensor changed in place after a dropped isend --------------------------------


def _popped_from(expr: ast.AST) -> ast.expr | None:
    """`X.pop(...)` / `X.popleft()` -> X."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("pop", "popleft"):
        return expr.func.value
    return None


def _wait_receiver(node: ast.AST) -> ast.expr | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "wait":
        return node.func.value
    return None


def _range_len(expr: ast.expr) -> ast.expr | None:
    """`range(len(X))` -> X."""
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Name)
        and expr.func.id == "range"
        and len(expr.args) == 1
        and isinstance(expr.args[0], ast.Call)
        and isinstance(expr.args[0].func, ast.Name)
        and expr.args[0].func.id == "len"
        and len(expr.args[0].args) == 1
    ):
        return expr.args[0].args[0]
    return None


def _unwrapped(expr: ast.expr) -> ast.expr:
    """`enumerate(X)`, `list(X)`, `reversed(X)` -> X, for the drain's text."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.args:
        if expr.func.id not in ("enumerate", "list", "tuple", "reversed", "sorted", "iter"):
            break
        expr = expr.args[0]
    return expr
