"""Take SGLang's PP-sync methods out of its cache class with `ast`, without importing SGLang.

Importing the module whole would pull in SGLang's dependency tree (triton, transformers
at SGLang's pinned version, ...). The event round needs only a handful of methods, which
use torch and a few attributes; those are what is taken here, by name, as source text
with their line numbers, so a traceback or stack dump points into the user's own file.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import operator
from dataclasses import dataclass, field
from pathlib import Path

from hicache_cli.errors import HicacheError, UsageError
from hicache_cli.targets import DRAIN_METHODS, how_it_frees

ENTRY = "check_hicache_events"
SYNC = "_pp_sync"
TAKEN = (
    ENTRY,
    SYNC,
    "_all_reduce",
    "_all_reduce_attn_groups",
    "writing_check",
    "loading_check",
    "_count_ready_acks",
    "_sync_hicache_ready_counts",
    *DRAIN_METHODS,
)
# Names the methods may use that the rank side provides (bind.py builds the namespace).
PROVIDED_NAMES = frozenset({"torch", "logger", "P2PTag", "Optional", "List", "Dict", "Tuple", "Any", "Union"})


class SourceError(UsageError):
    """The file given as SGLang's source cannot be read as Python: bad input."""


class NotApplicable(HicacheError):
    """This SGLang has no PP-sync path to test: the leak cannot happen in it."""

    exit_code = 4


@dataclass(frozen=True)
class Method:
    name: str
    source: str  # the `def` and its body, dedented; decorators left out
    first_line: int  # line of the `def` in the file
    decorators: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExtractedClass:
    class_name: str
    path: str
    sha256: str
    methods: dict[str, Method]
    drain_method: str | None  # one of DRAIN_METHODS, or None when the file has neither
    unresolved: tuple[str, ...] = field(default=())  # free names the namespace does not provide

    @property
    def uses_p2p_tag(self) -> bool:
        return any("P2PTag" in m.source for m in self.methods.values())

    def describe(self) -> str:
        return f"{self.class_name}.{self.drain_method or '?'}: {how_it_frees(self.drain_method)}"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def extract(path: Path, class_name: str) -> ExtractedClass:
    """The class's PP-sync methods from `path`; NotApplicable when it has no PP sync."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    if b"\0" in data:
        raise SourceError(f"{path} is not Python source: it holds NUL bytes (a binary file?)")
    text = data.decode("utf-8", errors="replace")
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        where = f", line {exc.lineno}" if exc.lineno else ""
        raise SourceError(f"{path} does not parse as Python ({exc.msg}{where})") from None
    except RecursionError:
        raise SourceError(f"{path} does not parse as Python (nested too deeply)") from None
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    if cls is None:
        raise NotApplicable(f"{path} defines no class {class_name}: not applicable")
    lines = text.splitlines(keepends=True)
    methods = {
        node.name: _method(node, lines) for node in cls.body if isinstance(node, ast.FunctionDef) and node.name in TAKEN
    }
    for needed in (ENTRY, SYNC):
        if needed not in methods:
            raise NotApplicable(
                f"{class_name} in {path} has no {needed}: this SGLang has no PP-sync path, not applicable"
            )
    drain = next((name for name in DRAIN_METHODS if name in methods), None)
    return ExtractedClass(
        class_name=class_name,
        path=str(path),
        sha256=hashlib.sha256(data).hexdigest(),
        methods=methods,
        drain_method=drain,
        unresolved=tuple(sorted(set().union(*(free_names(m.source) for m in methods.values())) - PROVIDED_NAMES)),
    )


def _method(node: ast.FunctionDef, lines: list[str]) -> Method:
    body = lines[node.lineno - 1 : node.end_lineno]
    indent = len(body[0]) - len(body[0].lstrip())
    source = "".join(_dedent(line, indent) for line in body)
    return Method(node.name, source, node.lineno, tuple(ast.unparse(d) for d in node.decorator_list))


def _dedent(line: str, indent: int) -> str:
    """Remove the method's indent from one line, keeping every line (so line numbers hold);
    a less indented line can only be inside a string, and is kept whole."""
    if line[:indent].strip():
        return line
    return line[indent:] or ("\n" if line.endswith("\n") else "")


def free_names(source: str) -> set[str]:
    """Names a function reads that it neither defines nor gets from builtins. Names used
    only in annotations are left out: they are never evaluated (`from __future__ import
    annotations`)."""
    func = ast.parse(source).body[0]
    assert isinstance(func, ast.FunctionDef)
    in_annotations = {id(n) for node in ast.walk(func) for n in _annotation_names(node)}
    bound: set[str] = set()
    loads: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not func:
            bound.add(node.name)
        elif isinstance(node, ast.Name) and id(node) not in in_annotations:
            (loads if isinstance(node.ctx, ast.Load) else bound).add(node.id)
    return {n for n in loads - bound if not hasattr(builtins, n)}


def _annotation_names(node: ast.AST) -> list[ast.Name]:
    found: list[ast.Name] = []
    for ann in (getattr(node, "annotation", None), getattr(node, "returns", None)):
        if isinstance(ann, ast.AST):
            found.extend(n for n in ast.walk(ann) if isinstance(n, ast.Name))
    return found


# Arithmetic an enum member's value may use; anything else (calls, attribute reads) is not run.
_INT_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.BitOr: operator.or_,
    ast.BitAnd: operator.and_,
    ast.BitXor: operator.xor,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}
INT_LIMIT = 2**63  # tags are C integers; this also bounds the work one expression can ask for


def read_int_enum(path: Path, class_name: str) -> dict[str, int]:
    """The int members of the enum `class_name` in `path` (communication_tags.py's P2PTag),
    read with `ast`: nothing in the file runs. A value may be an int, `auto()`, or arithmetic
    on ints, earlier members and the module's earlier int constants; others are left out."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (SyntaxError, ValueError, RecursionError) as exc:
        raise SourceError(f"{path} does not parse as Python ({exc})") from None
    constants: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return _enum_members(node, constants)
        if (target := _assigned_name(node)) is not None and (value := _int_value(node.value, constants)) is not None:
            constants[target] = value
    raise SourceError(f"{path} defines no class {class_name}")


def _enum_members(cls: ast.ClassDef, constants: dict[str, int]) -> dict[str, int]:
    members: dict[str, int] = {}
    last = 0  # auto() counts on from the previous member, from 1
    for node in cls.body:
        name = _assigned_name(node)
        if name is None or name.startswith("_"):
            continue
        value = last + 1 if _is_auto(node.value) else _int_value(node.value, {**constants, **members})
        if value is not None:
            members[name] = last = value
    return members


def _assigned_name(node: ast.stmt) -> str | None:
    """`NAME = value` or `NAME: T = value` -> NAME."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def _is_auto(node: ast.expr) -> bool:
    func = node.func if isinstance(node, ast.Call) and not node.args and not node.keywords else None
    return (isinstance(func, ast.Name) and func.id == "auto") or (
        isinstance(func, ast.Attribute) and func.attr == "auto"
    )


def _int_value(node: ast.expr, names: dict[str, int]) -> int | None:
    """An int expression's value, or None when it is anything else."""
    if isinstance(node, ast.Constant):
        value = node.value if type(node.value) is int else None
    elif isinstance(node, ast.Name):
        value = names.get(node.id)
    elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        operand = _int_value(node.operand, names)
        value = None if operand is None else _UNARY[type(node.op)](operand)
    elif isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
        left, right = _int_value(node.left, names), _int_value(node.right, names)
        if left is None or right is None:
            return None
        if isinstance(node.op, (ast.LShift, ast.RShift)) and not 0 <= right < 64:
            return None
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            return None
        value = _INT_OPS[type(node.op)](left, right)
    else:
        value = None
    return value if value is not None and abs(value) < INT_LIMIT else None
