"""What one module defines, from its top-level statements only (cheap: method bodies are not
read): its module-level imports (relative ones resolved against its package), star imports,
functions and their parameters, classes (bases as written, methods, class-level names, record
fields), module-level names, and re-exports (`isend = dist.isend`). This is the index every
other module's names are resolved through; the analysis adds what method bodies assign."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

Function = ast.FunctionDef | ast.AsyncFunctionDef
GETTERS = frozenset({"property", "cached_property", "functools.cached_property"})
RECORD_DECORATORS = frozenset({"dataclass", "dataclasses.dataclass", "attr.s", "attrs.define", "define", "frozen"})
RECORD_BASES = frozenset({"NamedTuple", "typing.NamedTuple", "TypedDict"})
TUPLE_FACTORIES = frozenset({"namedtuple", "collections.namedtuple", "NamedTuple", "typing.NamedTuple"})


def module_name(path: Path) -> str:
    """The dotted name a file is imported under, from the package directories above it
    (those holding an __init__.py); a file outside any package is its own stem."""
    parts = [] if path.stem == "__init__" else [path.stem]
    parent = path.parent
    while (parent / "__init__.py").is_file() and parent.name:
        parts.insert(0, parent.name)
        parent = parent.parent
    return ".".join(parts) or path.stem


def dotted(expr: ast.expr) -> str | None:
    """`a.b.c` as written, or None for anything but a chain of names."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.id)
    return ".".join(reversed(parts))


def absolute_import(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module an ImportFrom names (relative ones against this module's package)."""
    if not node.level:
        return node.module or ""
    parts = module.split(".") if module else []
    package = parts if is_package else parts[:-1]
    package = package[: max(0, len(package) - (node.level - 1))]
    return ".".join([*package, *([node.module] if node.module else [])])


def import_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[tuple[str, str]]:
    """(local name, dotted name it stands for) for each name an import binds; `*` is skipped."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                yield alias.asname, alias.name
            else:
                first = alias.name.split(".")[0]
                yield first, first
        return
    base = absolute_import(node, module, is_package)
    for alias in node.names:
        if alias.name != "*":
            yield alias.asname or alias.name, f"{base}.{alias.name}" if base else alias.name


@dataclass(slots=True)
class FunctionInfo:
    qualname: str  # `f`, `C.m`
    positional: tuple[str, ...]
    kwonly: tuple[str, ...]
    vararg: str | None
    kwarg: str | None
    bound: bool  # a method whose first parameter is self or cls
    getter: bool = False  # a @property: reading the attribute calls it

    @classmethod
    def of(cls, fn: Function, qualname: str, in_class: bool) -> FunctionInfo:
        args = fn.args
        decorators = {dotted(d) for d in fn.decorator_list}
        return cls(
            qualname,
            tuple(a.arg for a in [*args.posonlyargs, *args.args]),
            tuple(a.arg for a in args.kwonlyargs),
            args.vararg.arg if args.vararg else None,
            args.kwarg.arg if args.kwarg else None,
            in_class and "staticmethod" not in decorators,
            in_class and bool(decorators & GETTERS),
        )

    def parameter(self, index: int, bound: bool) -> str | None:
        names = self.positional[1:] if bound and self.bound else self.positional
        return names[index] if index < len(names) else self.vararg

    def keyword(self, name: str | None) -> str | None:
        if name is not None and (name in self.positional or name in self.kwonly):
            return name
        return self.kwarg


@dataclass(slots=True)
class ClassInfo:
    name: str
    bases: tuple[str, ...]  # as written (dotted), resolved by the program
    methods: dict[str, FunctionInfo] = field(default_factory=dict)
    declared: set[str] = field(default_factory=set)  # class-level names; the analysis adds `self.x = ...`
    fields: list[str] = field(default_factory=list)  # annotated class-level names, in order
    record: bool = False  # a dataclass or NamedTuple: constructor arguments go to fields
    tuple_like: bool = False  # a NamedTuple: also a tuple of what it holds


@dataclass(slots=True)
class ModuleInfo:
    name: str
    is_package: bool
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted name
    stars: list[str] = field(default_factory=list)  # modules star-imported, absolute
    functions: dict[str, FunctionInfo] = field(default_factory=dict)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)  # module-level names bound by assignment
    aliases: dict[str, str] = field(default_factory=dict)  # `isend = dist.isend`: name -> dotted

    @classmethod
    def of(cls, tree: ast.Module, name: str, is_package: bool) -> ModuleInfo:
        info = cls(name, is_package)
        for node in _top_level(tree.body):
            info._add(node)
        return info

    def _add(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                self.stars.append(absolute_import(node, self.name, self.is_package))
            self.imports.update(import_names(node, self.name, self.is_package))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self.functions[node.name] = FunctionInfo.of(node, node.name, False)
        elif isinstance(node, ast.ClassDef):
            self.classes[node.name] = class_info(node)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    self.names.add(target.id)
                    continue
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        self.names.add(leaf.id)
            value = node.value
            if isinstance(node, ast.Assign) and len(targets) == 1 and isinstance(targets[0], ast.Name) and value:
                if (text := dotted(value)) is not None and "." in text:
                    self.aliases[targets[0].id] = text
                elif (record := namedtuple_info(targets[0].id, value)) is not None:
                    self.classes[record.name] = record


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Module-level statements, also inside top-level if/try/with blocks (`try: import x`)."""
    todo = list(reversed(body))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If | ast.Try | ast.With | getattr(ast, "TryStar", ast.Try)):
            blocks = [node.body, getattr(node, "orelse", [])]
            blocks += [h.body for h in getattr(node, "handlers", [])] + [getattr(node, "finalbody", [])]
            for block in reversed(blocks):
                todo.extend(reversed(block))
        else:
            yield node


def namedtuple_info(name: str, value: ast.expr) -> ClassInfo | None:
    """`Rec = namedtuple("Rec", ["work", "buf"])` (or "work buf", or NamedTuple("Rec", [("work", T)]))."""
    if not (isinstance(value, ast.Call) and dotted(value.func) in TUPLE_FACTORIES and len(value.args) >= 2):
        return None
    spec = value.args[1]
    fields: list[str] = []
    if isinstance(spec, ast.Constant) and isinstance(spec.value, str):
        fields = spec.value.replace(",", " ").split()
    elif isinstance(spec, ast.List | ast.Tuple):
        for elt in spec.elts:
            if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                fields.append(elt.value)
            elif isinstance(elt, ast.Tuple) and elt.elts and isinstance(elt.elts[0], ast.Constant):
                fields.append(str(elt.elts[0].value))
    return ClassInfo(name, (), declared=set(fields), fields=fields, record=True, tuple_like=True)


def class_info(node: ast.ClassDef) -> ClassInfo:
    bases = tuple(text for base in node.bases if (text := dotted(base)) is not None)
    decorators = {dotted(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list}
    tuple_like = bool(set(bases) & {"NamedTuple", "typing.NamedTuple"})
    record = bool(decorators & RECORD_DECORATORS or set(bases) & RECORD_BASES)
    info = ClassInfo(node.name, bases, record=record, tuple_like=tuple_like)
    for item in _top_level(node.body):
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            info.methods[item.name] = FunctionInfo.of(item, f"{node.name}.{item.name}", True)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            info.fields.append(item.target.id)
            info.declared.add(item.target.id)
        elif isinstance(item, ast.Assign):
            info.declared |= {t.id for t in item.targets if isinstance(t, ast.Name)}
    return info
