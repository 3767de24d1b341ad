"""Scopes: which names a function, class or module binds, what `self` is, which names hold a
Work API chosen at run time, which locals are of a known class, and how a name resolves to a
place in the flow graph."""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from hicache_cli.lint.graph import ATTR, GLOBAL, LOCAL, Key
from hicache_cli.lint.modules import FunctionInfo, dotted, import_names

# A class as the analysis names it before the program resolves it: ("cls", mid, name) for a
# class of this module, ("sym", mid, dotted) for a name that may lead to one elsewhere.
ClassKey = tuple


_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_LOOPS = frozenset({ast.For, ast.AsyncFor, ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp})
_SKIPPED_FIELDS = frozenset({"ctx", "op", "ops"})  # Load/Store and operators: no names below them
_FIELDS: dict[type, tuple[str, ...]] = {}
_BINDING = frozenset(
    {ast.Global, ast.Nonlocal, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom}
    | {ast.ExceptHandler, ast.Assign, ast.AnnAssign}
)


def own_nodes(body: list[ast.stmt] | list[ast.AST]) -> Iterator[ast.AST]:
    """Every node of a body, in no particular order, not descending into nested functions,
    classes or lambdas (their def or lambda node itself is included). A direct walk over each
    node type's fields: ast.iter_child_nodes is most of the cost of a large module otherwise."""
    todo: list[ast.AST] = list(body)
    pop, push, extend = todo.pop, todo.append, todo.extend
    fields_of = _FIELDS
    node_type = ast.AST
    while todo:
        node = pop()
        yield node
        if isinstance(node, _NESTED):
            continue
        kind = type(node)
        fields = fields_of.get(kind)
        if fields is None:
            fields = fields_of[kind] = tuple(f for f in kind._fields if f not in _SKIPPED_FIELDS)
        for name in fields:
            value = getattr(node, name, None)
            if type(value) is list:
                extend(v for v in value if isinstance(v, node_type))
            elif isinstance(value, node_type):
                push(value)


@dataclass
class Scope:
    qualname: str
    kind: str  # module | class | function
    parent: Scope | None
    mid: int
    cls: ClassKey | None = None  # a class body's class, or the class of a method's self
    self_name: str | None = None
    locals: set[str] = field(default_factory=set)
    declared_global: set[str] = field(default_factory=set)
    aliases: dict[str, str] = field(default_factory=dict)  # local name -> the Work API it may hold
    loads: Counter[str] = field(default_factory=Counter)
    value_loads: Counter[str] = field(default_factory=Counter)  # loads other than `name(...)`
    imports: dict[str, str] = field(default_factory=dict)  # imports inside a function
    types: dict[str, ClassKey | None] = field(default_factory=dict)  # locals of one known class
    functions: dict[str, FunctionInfo] = field(default_factory=dict)  # functions defined here
    captured: set[Key] = field(default_factory=set)  # enclosing functions' locals this one reads
    bounded: dict[str, str] = field(default_factory=dict)  # `d = deque(maxlen=8)`: name -> its maxlen, as written
    renamed: dict[str, str] = field(default_factory=dict)  # a loop's own variable, while its loop is walked
    switches: set[str] = field(default_factory=set)  # parameters whose default is False or None
    _spans: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # loop target -> its loops' lines
    _not_loop: set[str] = field(default_factory=set)  # names also bound other than by a loop
    _load_lines: dict[str, list[int]] = field(default_factory=dict)
    _loop_names: set[str] | None = None

    def collect(
        self,
        body: list[ast.stmt],
        params: list[str],
        api_of: Callable[[ast.expr], str | None],
        class_of: Callable[[ast.expr], ClassKey | None],
        module: str,
        is_package: bool,
    ) -> None:
        """The names this scope binds, its reads, `global` declarations, imports, names assigned
        a Work API (`send = dist.isend if a else dist.send`) and locals made by a constructor."""
        self.locals.update(params)
        calls: set[int] = set()
        nonlocal_names: set[str] = set()
        locals_, loads, value_loads = self.locals, self.loads, self.value_loads
        name_type, call_type, store = ast.Name, ast.Call, ast.Store
        targets: set[int] = set()  # loop targets' names, met before them (a parent before its children)
        spans, not_loop, load_lines = self._spans, self._not_loop, self._load_lines
        for node in own_nodes(body):
            kind = type(node)
            if kind is name_type:  # most nodes: checked first, by type, not isinstance
                if type(node.ctx) is store:  # type: ignore[attr-defined]
                    locals_.add(node.id)  # type: ignore[attr-defined]
                    if id(node) not in targets:
                        not_loop.add(node.id)  # type: ignore[attr-defined]
                else:
                    loads[node.id] += 1  # type: ignore[attr-defined]
                    load_lines.setdefault(node.id, []).append(node.lineno)  # type: ignore[attr-defined]
                    if id(node) not in calls:
                        value_loads[node.id] += 1  # type: ignore[attr-defined]
            elif kind is call_type:
                if type(node.func) is name_type:  # type: ignore[attr-defined]
                    calls.add(id(node.func))  # type: ignore[attr-defined]
            elif kind in _LOOPS:
                gens = [node] if kind in (ast.For, ast.AsyncFor) else node.generators  # type: ignore[attr-defined]
                span = (node.lineno, node.end_lineno or node.lineno)  # type: ignore[attr-defined]
                for leaf in (n for gen in gens for n in ast.walk(gen.target)):  # type: ignore[attr-defined]
                    if type(leaf) is name_type:
                        targets.add(id(leaf))
                        spans.setdefault(leaf.id, []).append(span)  # type: ignore[attr-defined]
            elif kind in _BINDING:
                self._binding(node, nonlocal_names, api_of, class_of, module, is_package)
        self.locals -= self.declared_global | nonlocal_names
        if self.kind == "module":
            self.imports.clear()

    def _binding(
        self,
        node: ast.AST,
        nonlocal_names: set[str],
        api_of: Callable[[ast.expr], str | None],
        class_of: Callable[[ast.expr], ClassKey | None],
        module: str,
        is_package: bool,
    ) -> None:
        """A statement that binds names other than by a plain `name = ...` Name store."""
        if isinstance(node, ast.Global):
            self.declared_global.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            nonlocal_names.update(node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            self.locals.add(node.name)
            if node.decorator_list:
                self.value_loads[node.name] += 1  # a decorator may keep it
        elif isinstance(node, ast.Import | ast.ImportFrom):
            if self.kind == "function":
                self.imports.update(import_names(node, module, is_package))
            self.locals.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, ast.ExceptHandler):
            if node.name:
                self.locals.add(node.name)
        elif isinstance(node, ast.Assign):
            if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
                if (api := api_of(node.value)) is not None:
                    self.aliases[name] = api
                if isinstance(node.value, ast.Call):
                    self._type(name, class_of(node.value.func))
                    if (bound := deque_bound(node.value)) is not None:
                        self.bounded[name] = bound
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            self._type(node.target.id, class_of(_unquote(node.annotation)))

    def _type(self, name: str, key: ClassKey | None) -> None:
        """One known class per name; a name given two (or an unknown) has none."""
        if name in self.types and self.types[name] != key:
            self.types[name] = None
        else:
            self.types[name] = key

    def loop_names(self) -> set[str]:
        """Names bound only by loops (`for req in ...`, comprehensions) and read only inside a loop
        that binds them: each loop's variable is a place of its own, so `for req in self._reqs:
        req.wait()` does not wait what another loop's `req` goes through. Worked out on first use
        from what `collect` saw."""
        if self._loop_names is None:
            self._loop_names = {
                name
                for name, spans in self._spans.items()
                if name not in self._not_loop
                and name not in self.declared_global
                and all(any(a <= line <= b for a, b in spans) for line in self._load_lines.get(name, ()))
            }
        return self._loop_names

    def type_of(self, name: str) -> ClassKey | None:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.locals or scope.kind == "module":
                return scope.types.get(name)
            scope = scope.parent
        return None

    def node_for(self, name: str) -> Key:
        """The place a name stands for here: a function's local, a class attribute (in a class
        body), else a module-level name. Names of enclosing functions are theirs (closures)."""
        if self.kind == "class":
            return (ATTR, self.cls, name)
        scope: Scope | None = self
        while scope is not None:
            if name in scope.declared_global and scope.kind == "function":
                return (GLOBAL, self.mid, name)
            if scope.kind == "function" and name in scope.locals:
                key = (LOCAL, self.mid, scope.qualname, scope.renamed.get(name, name))
                if scope is not self:
                    self._capture(key, scope)
                return key
            scope = scope.parent
            while scope is not None and scope.kind == "class":  # a class body is not an enclosing scope
                scope = scope.parent
        return (GLOBAL, self.mid, name)

    def _capture(self, key: Key, owner: Scope) -> None:
        scope: Scope | None = self
        while scope is not None and scope is not owner:
            scope.captured.add(key)
            scope = scope.parent

    def lookup_import(self, name: str) -> str | None:
        """The dotted name a function-level import bound `name` to, seen from here."""
        scope: Scope | None = self
        while scope is not None:
            if scope.kind == "function":
                if name in scope.imports:
                    return scope.imports[name]
                if name in scope.locals:
                    return None
            scope = scope.parent
        return None

    def is_local(self, name: str) -> bool:
        """Bound in a function scope here or around (so not a module-level name)."""
        scope: Scope | None = self
        while scope is not None:
            if scope.kind == "function" and name in scope.locals and name not in scope.imports:
                return True
            if name in scope.declared_global:
                return False
            scope = scope.parent
        return False

    def function(self, name: str) -> tuple[Scope, FunctionInfo] | None:
        """A function defined in an enclosing function scope (a closure), by name."""
        scope: Scope | None = self
        while scope is not None and scope.kind != "module":
            if name in scope.functions:
                return scope, scope.functions[name]
            if scope.kind == "function" and name in scope.locals:
                return None
            scope = scope.parent
        return None

    def is_self(self, expr: ast.expr) -> bool:
        """`self` (or `cls`) of the method this code is in, also seen from a closure inside it."""
        if not isinstance(expr, ast.Name):
            return False
        return self.self_scope(expr.id) is not None

    def self_scope(self, name: str) -> Scope | None:
        scope: Scope | None = self
        while scope is not None:
            if scope.kind == "function" and name in scope.locals:
                return scope if scope.self_name == name else None
            scope = scope.parent
        return None

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


def _unquote(annotation: ast.expr) -> ast.expr:
    """`"Comm"` and `Optional[Comm]` -> `Comm`, as far as an annotation names one class."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            return ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return annotation
    if isinstance(annotation, ast.Subscript) and dotted(annotation.value) in ("Optional", "typing.Optional"):
        return _unquote(annotation.slice)
    if isinstance(annotation, ast.Subscript) and dotted(annotation.value) in ("Union", "typing.Union"):
        parts = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        named = [p for p in parts if not (isinstance(p, ast.Constant) and p.value is None)]
        return _unquote(named[0]) if len(named) == 1 else annotation
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):  # `ProcessGroup | None`
        named = [
            p for p in (annotation.left, annotation.right) if not (isinstance(p, ast.Constant) and p.value is None)
        ]
        return _unquote(named[0]) if len(named) == 1 else annotation
    return annotation


def annotation_class(annotation: ast.expr | None) -> ast.expr | None:
    return None if annotation is None else _unquote(annotation)


@dataclass
class Loop:
    line: int
    is_while: bool
    node: ast.While | ast.For | ast.AsyncFor
    _fresh: set[str] | None = None

    @property
    def fresh(self) -> set[str]:
        """Names the loop's body binds to something new: `works = []` is fresh, `pending = [w
        for w in pending if ...]` is not (it keeps what the name held). Worked out on first use."""
        if self._fresh is None:
            self._fresh = fresh_bindings(self.node)
        return self._fresh


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def fresh_bindings(loop: ast.While | ast.For | ast.AsyncFor) -> set[str]:
    fresh: set[str] = set()
    for node in own_nodes(loop.body):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            used = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            fresh |= {name for t in targets for name in _bound_names(t) if name not in used}
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
            fresh |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
    return fresh


def _bound_names(target: ast.expr) -> list[str]:
    """The names an assignment target binds: `a`, `a, (b, *c)`; not those it only reads
    (`pending[step] = ...` binds nothing: it changes what `pending` holds)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [name for elt in target.elts for name in _bound_names(elt)]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return []


def deque_bound(call: ast.Call) -> str | None:
    """`deque(maxlen=8)`, `collections.deque(xs, 8)` -> "8": a container that never holds more
    than that (the oldest falls off); None for anything else, or a maxlen of None."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name != "deque":
        return None
    given = next((k.value for k in call.keywords if k.arg == "maxlen"), None)
    if given is None and len(call.args) >= 2:
        given = call.args[1]
    if given is None or (isinstance(given, ast.Constant) and given.value is None):
        return None
    return ast.unparse(given)
