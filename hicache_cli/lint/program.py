"""One program: the modules of a target, what their names resolve to across modules, and which
classes are one hierarchy.

A module is named from the package directories above it (`__init__.py`), and also by every
dotted suffix of its path below the target (namespace packages, `src/` layouts); an import
resolves to the first. Names resolve through imports, re-exports (`from .comm import send` in a
package's `__init__`, `isend = dist.isend`) and star imports, to a function, a class, a module,
a module-level name, or a name outside the program (`torch.distributed.isend`, with wrapper
modules mapped onto torch.distributed). A module's index is read (parsed, top level only) the
first time a name needs it, so a program's unrelated files are never parsed.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hicache_cli.lint.apis import COLLECTIVES, P2P_METHODS, PG_CLASSES, WAIT_FUNCTIONS
from hicache_cli.lint.config import DIST, LintConfig
from hicache_cli.lint.modules import ClassInfo, FunctionInfo, ModuleInfo, module_name

MAX_DEPTH = 16
DIST_API = frozenset(
    {*P2P_METHODS, *COLLECTIVES, *WAIT_FUNCTIONS}
)  # re-export chains followed this far (and no further: a cycle ends here)


@dataclass(frozen=True, slots=True)
class External:
    qualname: str  # canonical: torch.distributed's functions under their own names


@dataclass(frozen=True, slots=True)
class FunctionRef:
    mid: int
    info: FunctionInfo
    cls: str | None = None  # the class, for a method named through it (`Comm.send`)


@dataclass(frozen=True, slots=True)
class ClassRef:
    mid: int
    name: str


@dataclass(frozen=True, slots=True)
class ModuleRef:
    mid: int


@dataclass(frozen=True, slots=True)
class GlobalRef:
    mid: int
    name: str


Symbol = External | FunctionRef | ClassRef | ModuleRef | GlobalRef


@dataclass
class Program:
    paths: list[Path]
    roots: list[Path | None]
    config: LintConfig
    parse: Callable[[int], ast.Module | None]  # a module's tree (None: it cannot be read or parsed)
    names: list[str] = field(default_factory=list)
    by_name: dict[str, int] = field(default_factory=dict)
    by_suffix: dict[str, int | None] = field(default_factory=dict)  # None: more than one module
    infos: dict[int, ModuleInfo] = field(default_factory=dict)
    _parents: dict[ClassRef, list[ClassRef]] = field(default_factory=dict)
    _internal: dict[str, bool] = field(default_factory=dict)
    _children: dict[ClassRef, list[ClassRef]] = field(default_factory=dict)
    _process_groups: dict[ClassRef, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        package_dirs: dict[Path, bool] = {}
        for mid, (path, root) in enumerate(zip(self.paths, self.roots, strict=True)):
            name = _module_name_cached(path, package_dirs)
            self.names.append(name)
            self.by_name.setdefault(name, mid)
            for suffix in _suffixes(path, root):
                self.by_suffix[suffix] = mid if self.by_suffix.get(suffix, mid) == mid else None

    # --- modules --------------------------------------------------------------------------------

    def info(self, mid: int) -> ModuleInfo | None:
        if mid not in self.infos:
            tree = self.parse(mid)
            if tree is None:
                return None
            self.set_info(mid, ModuleInfo.of(tree, self.names[mid], self.paths[mid].name == "__init__.py"))
        return self.infos[mid]

    def set_info(self, mid: int, info: ModuleInfo) -> None:
        self.infos[mid] = info

    def module(self, name: str) -> int | None:
        found = self.by_name.get(name)
        return found if found is not None else self.by_suffix.get(name)

    def is_api(self, dotted: str) -> bool:
        """torch.distributed's own API under any of its names (or a wrapper's): never resolved
        into the program, even when the program is torch itself."""
        if self.config.is_wrapper(dotted):
            return True
        canonical = self.config.canonical(dotted)
        return canonical == DIST or (canonical.startswith(DIST + ".") and canonical.rsplit(".", 1)[1] in DIST_API)

    def is_internal(self, dotted: str) -> bool:
        """Whether a dotted name may lead into the program (so it is resolved later, not now).
        Asked once per name: a module calls `dist.isend` thousands of times."""
        found = self._internal.get(dotted)
        if found is None:
            parts = dotted.split(".")
            found = not self.is_api(dotted) and any(
                self.module(".".join(parts[:i])) is not None for i in range(len(parts), 0, -1)
            )
            self._internal[dotted] = found
        return found

    # --- names ----------------------------------------------------------------------------------

    def resolve(self, dotted: str, depth: int = 0) -> Symbol | None:
        """An absolute dotted name -> what it is."""
        if self.is_api(dotted):
            return External(self.config.canonical(dotted))
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            mid = self.module(".".join(parts[:i]))
            if mid is not None:
                return self.resolve_in(mid, parts[i:], depth + 1)
        return External(self.config.canonical(dotted))

    def resolve_in(self, mid: int, parts: list[str], depth: int = 0) -> Symbol | None:
        """`parts` looked up in module `mid`'s namespace."""
        if not parts:
            return ModuleRef(mid)
        if depth > MAX_DEPTH:
            return None
        info = self.info(mid)
        if info is None:
            return None
        name, rest = parts[0], parts[1:]
        if name in info.functions:
            return FunctionRef(mid, info.functions[name]) if not rest else None
        if name in info.classes:
            if not rest:
                return ClassRef(mid, name)
            method = self.method(ClassRef(mid, name), rest[0])
            return method if len(rest) == 1 else None
        if name in info.imports:
            return self.resolve(".".join([info.imports[name], *rest]), depth + 1)
        if name in info.aliases:  # `isend = dist.isend`: the right side read in this module
            return self.resolve_in(mid, [*info.aliases[name].split("."), *rest], depth + 1)
        if name in info.names:
            return GlobalRef(mid, name)
        sub = self.module(f"{info.name}.{name}" if info.name else name)
        if sub is not None and sub != mid:
            return self.resolve_in(sub, rest, depth + 1)
        for star in info.stars:
            star_mid = self.module(star)
            if star_mid is None:
                if star == DIST or self.config.is_wrapper(star) or star.startswith(DIST + "."):
                    return External(self.config.canonical(".".join([star, *parts])))
                continue
            if star_mid != mid:
                found = self.resolve_in(star_mid, parts, depth + 1)
                if found is not None:
                    return found
        return None

    # --- classes --------------------------------------------------------------------------------

    def class_info(self, ref: ClassRef) -> ClassInfo | None:
        info = self.info(ref.mid)
        return info.classes.get(ref.name) if info is not None else None

    def parents(self, ref: ClassRef) -> list[ClassRef]:
        """The class's bases that are classes of the program (read the first time asked)."""
        if ref not in self._parents:
            self._parents[ref] = []
            info, module = self.class_info(ref), self.info(ref.mid)
            found: list[ClassRef] = []
            if info is not None and module is not None:
                for base in info.bases:
                    head, _, rest = base.partition(".")
                    symbol = ClassRef(ref.mid, head) if head in module.classes and not rest else None
                    symbol = symbol or self.resolve_in(ref.mid, base.split("."))
                    if isinstance(symbol, ClassRef) and symbol != ref:
                        found.append(symbol)
                        self._children.setdefault(symbol, []).append(ref)
            self._parents[ref] = found
        return self._parents[ref]

    def ancestors(self, ref: ClassRef) -> list[ClassRef]:
        """The class, then its bases in the program, breadth first (each once)."""
        out, todo = [ref], [ref]
        while todo and len(out) < MAX_DEPTH * 4:
            for parent in self.parents(todo.pop(0)):
                if parent not in out:
                    out.append(parent)
                    todo.append(parent)
        return out

    def descendants(self, ref: ClassRef) -> list[ClassRef]:
        """The subclasses of the class known so far (those whose bases were read)."""
        out, todo = [], [ref]
        while todo and len(out) < MAX_DEPTH * 16:
            for child in self._children.get(todo.pop(0), []):
                if child not in out:
                    out.append(child)
                    todo.append(child)
        return out

    def declares(self, ref: ClassRef, attr: str) -> bool:
        info = self.class_info(ref)
        return info is not None and attr in info.declared

    def owners(self, ref: ClassRef, attr: str) -> list[ClassRef]:
        """Whose attribute `self.attr` in class `ref` is: the most basic of its ancestors that
        assigns it (a subclass sees its base's); else the subclasses that assign it (a mixin's
        attribute is its hosts'); else its own, assigned by no class of the program."""
        declaring = [a for a in self.ancestors(ref) if self.declares(a, attr)]
        if declaring:
            return [declaring[-1]]
        return [d for d in self.descendants(ref) if self.declares(d, attr)] or [ref]

    def is_process_group(self, ref: object) -> bool:
        """Whether a class of the program is a torch.distributed ProcessGroup (a base of it, in
        any module, is torch's): its collectives and sends return Works whatever it overrides."""
        if not isinstance(ref, ClassRef):
            return False
        if ref not in self._process_groups:
            self._process_groups[ref] = False
            found = False
            for cls in self.ancestors(ref):
                info = self.class_info(cls)
                for base in info.bases if info is not None else ():
                    resolved = self.resolve_in(cls.mid, base.split("."))
                    found |= isinstance(resolved, External) and resolved.qualname in PG_CLASSES
            self._process_groups[ref] = found
        return self._process_groups[ref]

    def method(self, ref: ClassRef, name: str) -> FunctionRef | None:
        """`name` as a method of `ref` or its bases in the program (the first found)."""
        seen: set[ClassRef] = set()
        todo = [ref]
        while todo:
            current = todo.pop(0)
            if current in seen or len(seen) > MAX_DEPTH * 4:
                continue
            seen.add(current)
            info = self.class_info(current)
            if info is None:
                continue
            if name in info.methods:
                return FunctionRef(current.mid, info.methods[name], current.name)
            for base in info.bases:
                found = self.resolve_in(current.mid, base.split("."))
                if isinstance(found, ClassRef):
                    todo.append(found)
        return None


def _module_name_cached(path: Path, package_dirs: dict[Path, bool]) -> str:
    """module_name, with each directory's `__init__.py` looked up once."""
    parts = [] if path.stem == "__init__" else [path.stem]
    parent = path.parent
    while parent.name:
        if parent not in package_dirs:
            package_dirs[parent] = (parent / "__init__.py").is_file()
        if not package_dirs[parent]:
            break
        parts.insert(0, parent.name)
        parent = parent.parent
    return ".".join(parts) or path.stem


def _suffixes(path: Path, root: Path | None) -> list[str]:
    """`pkg.sub.mod`, `sub.mod`: the dotted path below the target, and its tails of two or more."""
    if root is None:
        return []
    try:
        rel = path.relative_to(root)
    except ValueError:
        return []
    parts = list(rel.with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    if not parts or not all(p.isidentifier() for p in parts):
        return []
    return [".".join(parts[i:]) for i in range(len(parts) - 1)]


__all__ = ["ClassRef", "External", "FunctionRef", "GlobalRef", "ModuleRef", "Program", "Symbol", "module_name"]
