"""Containers as the module walker meets them: each allocation site (a literal, a comprehension,
`list(x)`, a slice) is an object of its own, what is put into a container goes into its
contents, and what is read out of one comes from them (graph.py's Put and Take, resolved by the
containers a value may hold: containers.py). A tuple keeps its elements apart, a dict its values
by constant key, so `a, b = pair` and `handle[kind + "_work"]` read one element, one key."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from hicache_cli.lint.apis import STORE_METHODS
from hicache_cli.lint.graph import CONTAINER, NOTHING, KeyTag, Nodes

if TYPE_CHECKING:
    from hicache_cli.lint.build import ModuleWalker

Keywords = dict[str | None, Nodes]
TAKEN = "Tk"  # the node of one read out of a container
# builtins and library calls whose result is a new container holding what their arguments hold
COPIES = frozenset({"list", "tuple", "set", "frozenset", "sorted", "reversed", "iter", "filter"})
COPIES_QUALIFIED = frozenset({"collections.deque", "itertools.chain", "itertools.islice", "queue.deque"})
# ... whose result is a new empty container (filled later)
EMPTY_QUALIFIED = frozenset({"collections.defaultdict", "collections.OrderedDict", "collections.deque"})
DICT_MAKERS = frozenset({"dict", "collections.defaultdict", "collections.OrderedDict"})


def key_tag(expr: ast.expr | None) -> KeyTag:
    """A dict key as far as the analysis tells keys apart: a constant (`"work"`, `3`), or a
    constant ending (`kind + "_work"`, `f"{kind}_work"`); None for anything else."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str | int | bytes):
        return ("=", repr(expr.value) if not isinstance(expr.value, str) else expr.value)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        right = expr.right
        if isinstance(right, ast.Constant) and isinstance(right.value, str) and right.value:
            return ("~", right.value)
    if isinstance(expr, ast.JoinedStr) and expr.values:
        last = expr.values[-1]
        if isinstance(last, ast.Constant) and isinstance(last.value, str) and last.value:
            return ("~", last.value)
    return None


def tags_agree(a: object, b: object) -> bool:
    """Whether two dict keys may be the same key."""
    if a is None or b is None or not isinstance(a, tuple) or not isinstance(b, tuple):
        return True
    (how_a, text_a), (how_b, text_b) = a, b
    if how_a == "=" and how_b == "=":
        return text_a == text_b
    if how_a == "=":
        return text_a.endswith(text_b)
    if how_b == "=":
        return text_b.endswith(text_a)
    return text_a.endswith(text_b) or text_b.endswith(text_a)


def tuple_index(expr: ast.expr) -> int | None:
    if isinstance(expr, ast.Constant) and type(expr.value) is int:
        return expr.value
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub) and isinstance(expr.operand, ast.Constant):
        value = expr.operand.value
        return -value if type(value) is int else None
    return None


class Allocations:
    """Mixed into ModuleWalker: allocation sites, and what goes into and out of containers."""

    def allocation(self: ModuleWalker, node: ast.AST, kind: str, arity: int = 0, role: str = "") -> int:
        key = (CONTAINER, self.mid, getattr(node, "lineno", 0), getattr(node, "col_offset", 0), role or kind)
        return self.g.container(key, kind, arity)

    def take(
        self: ModuleWalker, receiver: Nodes, key: KeyTag = None, index: int | None = None, opened: bool = True
    ) -> int:
        """A read out of the containers `receiver` holds: the node it lands in."""
        target = self.n((TAKEN, self.mid, len(self.g.take_ops)))
        self.g.take(receiver, target, key, index, opened)
        return target

    def literal(self: ModuleWalker, node: ast.List | ast.Set | ast.Tuple | ast.Dict) -> Nodes:
        """`[a, b]`, `{a}`, `(a, b)`, `{k: v}`: a new container holding what its parts hold."""
        if isinstance(node, ast.Dict):
            token = self.allocation(node, "dict")
            for key, value in zip(node.keys, node.values, strict=True):
                if key is None:  # `{**other}`
                    self._fill(token, self.take(self.ev(value)))
                else:
                    self.ev(key)
                    self._fill(token, self.ev(value), key_tag(key))
            return frozenset({token})
        starred = any(isinstance(e, ast.Starred) for e in node.elts)
        if isinstance(node, ast.Tuple) and not starred:
            token = self.allocation(node, "tuple", len(node.elts))
            for i, elt in enumerate(node.elts):
                element, _ = self.g.content(token, i)
                self.g.link(self.ev(elt), element)
            return frozenset({token})
        token = self.allocation(node, "set" if isinstance(node, ast.Set) else "list")
        for elt in node.elts:
            if isinstance(elt, ast.Starred):
                self._fill(token, frozenset({self.take(self.ev(elt.value))}))
            else:
                self._fill(token, self.ev(elt))
        return frozenset({token})

    def _fill(self: ModuleWalker, token: int, values: Nodes | int, tag: KeyTag = None) -> None:
        """What a new container is made with: straight into its contents (no Put: it is known)."""
        contents, _ = self.g.content(token, tag)
        self.g.link(frozenset({values}) if isinstance(values, int) else values, contents)

    def copy_of(self: ModuleWalker, node: ast.AST, sources: list[Nodes], kind: str = "list") -> Nodes:
        """`list(x)`, `sorted(x)`, `x[a:b]`, `chain(x, y)`: a new container holding what the sources hold."""
        token = self.allocation(node, kind)
        contents, _ = self.g.content(token)
        for source in sources:
            if source:
                self.g.take(source, contents)
        return frozenset({token})

    def rows_of(self: ModuleWalker, node: ast.AST, columns: list[Nodes | None]) -> Nodes:
        """`enumerate(x)`, `zip(x, y)`, `d.items()`: a new container of tuples whose element i holds
        what column i's containers hold (None: a column of keys or counters, nothing followed)."""
        row = self.allocation(node, "tuple", len(columns), role="row")
        for i, column in enumerate(columns):
            element, _ = self.g.content(row, i)
            if column:
                self.g.take(column, element)
        token = self.allocation(node, "list", role="rows")
        self._fill(token, frozenset({row}))
        return frozenset({token})

    def unpack(self: ModuleWalker, target: ast.Tuple | ast.List, values: Nodes, where: ast.AST) -> None:
        """`a, b = x`, `for t, w in pairs`: element i of each tuple x holds goes to the i-th name;
        what x holds that is no tuple goes to every name."""
        starred = next((i for i, e in enumerate(target.elts) if isinstance(e, ast.Starred)), None)
        for i, elt in enumerate(target.elts):
            if isinstance(elt, ast.Starred):
                self.bind(elt.value, self.copy_of(elt, [values]), where)
                continue
            index = i if starred is None or i < starred else i - len(target.elts)
            self.bind(elt, frozenset({self.take(values, index=index, opened=False)}), where)

    def subscript(self: ModuleWalker, node: ast.Subscript) -> Nodes:
        """`x[k]`: one read of x's contents (a tuple's element, a dict's key); `x[a:b]`: a copy."""
        container = self.ev(node.value)
        self.ev(node.slice)
        if isinstance(node.slice, ast.Slice):
            return self.copy_of(node, [container])
        index, key = tuple_index(node.slice), key_tag(node.slice)
        # `x[0]` and `d["work"]` read one element, one key: no more, unless x turns out a list
        return frozenset({self.take(container, key, index, opened=index is None and key is None)})

    def container_method(
        self: ModuleWalker,
        node: ast.Call,
        method: str,
        held: Nodes,
        positional: list[Nodes],
        keywords: Keywords,
        text: str,
    ) -> Nodes:
        """What a container's own method does with its contents: `append`/`add`/`put` puts its
        argument in, `extend`/`update` the argument's contents, `setdefault` both ways; `pop`/`get`
        takes one out (by key, for a dict), `items()` pairs keys with values; `values()` and
        `copy()` are the same contents."""
        key = key_tag(node.args[0]) if node.args else None
        if method in ("extend", "extendleft", "update"):
            added = [frozenset({self.take(values)}) for values in positional[:1] if values]
            for name, values in keywords.items():
                if name is not None and values:
                    self.store(values, held, node, text, grows=True, key=("=", name))
            self.store(frozenset().union(*added), held, node, text, grows=True)
            return NOTHING
        if method in STORE_METHODS:
            kept = positional[1:2] if method in ("insert", "setdefault") else positional[:1]
            self.store(frozenset().union(*kept), held, node, text, grows=True, key=key)
            if method != "setdefault":
                return NOTHING
        if method in ("pop", "popleft", "popitem", "get", "setdefault"):
            default = positional[1] if len(positional) > 1 and method in ("get", "pop") else NOTHING
            return frozenset({self.take(held, key if method != "popitem" else None)}) | default
        if method == "items":
            return self.rows_of(node, [None, held])
        if method == "keys":
            return self.copy_of(node, [])
        return held  # values, copy, and a Work's future (get_future, then, result, value)

    def dict_made(self: ModuleWalker, node: ast.Call, positional: list[Nodes], keywords: Keywords) -> Nodes:
        """`dict(x, k=v)`, `defaultdict(list)`: a new dict holding x's contents and the keywords."""
        token = self.allocation(node, "dict")
        if positional and positional[0] and not _is_factory_argument(node):
            self._fill(token, self.take(positional[0]))
        for name, values in keywords.items():
            if name is None:
                self._fill(token, self.take(values))
            elif values:
                self._fill(token, values, ("=", name))
        return frozenset({token})


def _is_factory_argument(node: ast.Call) -> bool:
    """`defaultdict(list)`: its argument makes values, it holds none."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name == "defaultdict"


__all__ = ["NOTHING", "Allocations", "key_tag", "tags_agree"]
