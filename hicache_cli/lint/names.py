"""What the names of one module stand for: its imports (anywhere in the file, relative ones
resolved against its package), and the functions, classes and methods it defines."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

DIST = "torch.distributed"
# Where torch.distributed's functions are defined; a name imported from there is the same function.
DIST_MODULES = ("torch.distributed.distributed_c10d.", "torch.distributed.c10d.")


def canonical(qualname: str) -> str:
    """`torch.distributed.distributed_c10d.isend` -> `torch.distributed.isend`."""
    for prefix in DIST_MODULES:
        if qualname.startswith(prefix):
            return DIST + "." + qualname[len(prefix) :]
    return qualname


def module_name(path: Path) -> str:
    """The dotted name a file is imported under, from the package directories above it
    (those holding an __init__.py); a file outside any package is its own stem."""
    parts = [] if path.stem == "__init__" else [path.stem]
    parent = path.parent
    while (parent / "__init__.py").is_file() and parent.name:
        parts.insert(0, parent.name)
        parent = parent.parent
    return ".".join(parts) or path.stem


def _package_of(module: str, is_package: bool) -> list[str]:
    parts = module.split(".") if module else []
    return parts if is_package else parts[:-1]


@dataclass
class Imports:
    """Local name -> the dotted name it was imported as. Imports anywhere in the module count
    (SGLang imports torch.distributed inside functions); a name imported twice keeps the last."""

    table: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, tree: ast.Module, module: str, is_package: bool) -> Imports:
        table: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        table[alias.asname] = alias.name
                    else:
                        first = alias.name.split(".")[0]
                        table[first] = first
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = _package_of(module, is_package)
                    package = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                    base = ".".join([*package, *([node.module] if node.module else [])])
                for alias in node.names:
                    if alias.name != "*":
                        table[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name
        return cls(table)

    def qualname(self, expr: ast.expr) -> str | None:
        """`dist.isend` -> `torch.distributed.isend` when `dist` was imported; None when the
        expression does not start from an imported name."""
        if isinstance(expr, ast.Name):
            found = self.table.get(expr.id)
            return canonical(found) if found else None
        if isinstance(expr, ast.Attribute):
            base = self.qualname(expr.value)
            return canonical(f"{base}.{expr.attr}") if base else None
        return None


def is_static(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)


@dataclass
class ClassInfo:
    name: str
    node: ast.ClassDef
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    fields: list[str]  # annotated class-level names, in order: a dataclass's constructor arguments


Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class ModuleIndex:
    """The module's own definitions, by name: what a call can be resolved to."""

    module: str
    imports: Imports
    functions: dict[str, Function]  # module-level functions
    classes: dict[str, ClassInfo]  # module-level classes
    methods: dict[str, list[tuple[str, Function]]]  # method name -> (class, def), every class
    owned: set[str]  # attributes its classes assign (`self.x = ...`, class-level names): theirs to manage

    @classmethod
    def of(cls, tree: ast.Module, module: str, is_package: bool) -> ModuleIndex:
        functions: dict[str, Function] = {}
        classes: dict[str, ClassInfo] = {}
        methods: dict[str, list[tuple[str, Function]]] = {}
        owned: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                own: dict[str, Function] = {}
                fields: list[str] = []
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        own[item.name] = item
                        methods.setdefault(item.name, []).append((node.name, item))
                        owned |= _assigned_on_self(item)
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        fields.append(item.target.id)
                    elif isinstance(item, ast.Assign):
                        owned |= {t.id for t in item.targets if isinstance(t, ast.Name)}
                owned.update(fields)
                classes[node.name] = ClassInfo(node.name, node, own, fields)
        return cls(module, Imports.of(tree, module, is_package), functions, classes, methods, owned)

    def qualname(self, expr: ast.expr) -> str | None:
        """As Imports.qualname, and a bare name the module defines itself is `module.name` (so
        torch's own distributed_c10d calling its `isend` is still torch.distributed.isend)."""
        found = self.imports.qualname(expr)
        if found is None and isinstance(expr, ast.Name) and expr.id in self.functions:
            return canonical(f"{self.module}.{expr.id}")
        return found


def _assigned_on_self(fn: Function) -> set[str]:
    """The attributes a method assigns on its first parameter (`self.work_list = []`)."""
    positional = [*fn.args.posonlyargs, *fn.args.args]
    if not positional or is_static(fn):
        return set()
    me = positional[0].arg
    return {
        node.attr
        for node in ast.walk(fn)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id == me
    }
