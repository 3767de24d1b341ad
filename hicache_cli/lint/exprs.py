"""Expressions, for the module walker: what a value may hold (the nodes it reads from, or the
origin it creates), lambdas and comprehensions."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from hicache_cli.lint.graph import LOCAL, NOTHING, TRUE, Nodes

Keywords = dict[str | None, Nodes]

if TYPE_CHECKING:
    from hicache_cli.lint.build import ModuleWalker


class Expressions:
    """Mixed into ModuleWalker: evaluating expressions to the nodes they may hold."""

    def ev(self: ModuleWalker, node: ast.expr | None) -> Nodes:
        """What the expression's value may hold: the nodes it reads from, or the origin it creates."""
        if node is None:
            return NOTHING
        if isinstance(node, ast.Constant):
            return frozenset({self.n((TRUE,))}) if node.value is True else NOTHING
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load) and (function := self.function_value(node)) is not None:
                return function
            return frozenset({self.n(self.name_key(node.id))})
        if isinstance(node, ast.Attribute):
            if node.attr == "wait" and isinstance(node.ctx, ast.Load):
                # `x.wait` handed on as a callable (`instrument(self.handle.wait)()`, a callback):
                # it will be called, so x counts as waited.
                self.wait_on(self.ev(node.value), node, ast.unparse(node.value))
            if isinstance(node.ctx, ast.Load) and (function := self.function_value(node)) is not None:
                return function
            if isinstance(node.ctx, ast.Load) and (group := self.pg_value(node)) is not None:
                return group
            return frozenset({self.attr_node(node)})
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.IfExp):
            self.ev(node.test)
            with self.guarded(node.test):
                body = self.ev(node.body)
            return body | self.ev(node.orelse)
        if isinstance(node, ast.BinOp):  # `works_a + works_b`; long chains are flattened, not recursed
            parts, todo = [], [node]
            while todo:
                part = todo.pop()
                if isinstance(part, ast.BinOp):
                    todo += [part.right, part.left]
                else:
                    parts.append(part)
            return frozenset().union(*(self.ev(p) for p in parts))
        if isinstance(node, ast.BoolOp):
            return frozenset().union(*(self.ev(p) for p in node.values))
        if isinstance(node, ast.List | ast.Tuple | ast.Set | ast.Dict):
            return self.literal(node)
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            return self.comprehension(node)
        if isinstance(node, ast.NamedExpr):
            values = self.ev(node.value)
            self.bind(node.target, values, node)
            return values
        if isinstance(node, ast.Starred | ast.Await):
            return self.ev(node.value)
        if isinstance(node, ast.Yield | ast.YieldFrom):
            self.g.escape(self.ev(node.value), "yielded")
            return NOTHING
        if isinstance(node, ast.Lambda):
            return self.lambda_value(node, NOTHING)
        for child in ast.iter_child_nodes(node):  # compare, unary, f-strings, slices: read, keep nothing
            if isinstance(child, ast.expr):
                self.ev(child)
        if isinstance(node, ast.Compare) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
            # a truth value: it may be True wherever it goes (`overlap = stream is not None`,
            # then `async_op=overlap`), as it may be when written in the call itself
            return frozenset({self.n((TRUE,))})
        return NOTHING

    def lambda_value(self: ModuleWalker, node: ast.Lambda, feed: Nodes) -> Nodes:
        """A lambda is a function: its body is walked in its own scope; `feed` goes to its first
        parameter (`filter(lambda w: w.wait(), works)`: each element of works)."""
        scope = self.function(node, None)
        if node.args.args and feed:
            self.g.link(feed, self.n((LOCAL, self.mid, scope.qualname, node.args.args[0].arg)))
        return NOTHING

    def comprehension(self: ModuleWalker, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> Nodes:
        """A new container (its allocation site is the comprehension) holding what `elt` holds."""
        renamed = [pair for gen in node.generators for pair in self.own_loop_names(gen.target, node)]
        try:
            return self._comprehension(node)
        finally:
            self.end_loop_names(renamed)

    def _comprehension(self: ModuleWalker, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> Nodes:
        for gen in node.generators:
            items = self.ev(gen.iter)
            self.bind(gen.target, frozenset({self.take(items)}), node)
            for cond in gen.ifs:
                self.ev(cond)
        if isinstance(node, ast.DictComp):
            token = self.allocation(node, "dict")
            self.ev(node.key)
            self._fill(token, self.ev(node.value))
            return frozenset({token})
        first = node.generators[0]
        if len(node.generators) == 1:
            names = {n.id for n in ast.walk(first.target) if isinstance(n, ast.Name)}
            receiver = _wait_of(node.elt)
            if receiver is not None and isinstance(receiver.func.value, ast.Name) and receiver.func.value.id in names:
                self.drain(receiver, self.ev(first.iter), first.iter)
        token = self.allocation(node, "set" if isinstance(node, ast.SetComp) else "list")
        self._fill(token, self.ev(node.elt))
        return frozenset({token})

    # --- calls --------------------------------------------------------------------------------

    def args(self: ModuleWalker, call: ast.Call) -> tuple[list[Nodes], Keywords]:
        positional = [self.ev(a) for a in call.args]
        keywords = {k.arg: self.ev(k.value) for k in call.keywords}
        return positional, keywords


def _wait_of(expr: ast.expr) -> ast.Call | None:
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "wait":
        return expr
    return None
