"""What to read: TARGETs (files, directories, SGLang specs) -> Python files, and the targets
that cannot be read, each with one line saying why."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hicache_cli.errors import UsageError
from hicache_cli.lint.findings import InputProblem
from hicache_cli.sglang_target.locate import locate_tree, parse_target

# Directories a walk does not enter: hidden ones (.git, .venv, .tox), caches, virtualenvs.
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules"})
SGLANG_RUNTIME = Path("sglang") / "srt"  # what `lint sglang...` reads: SGLang's runtime


@dataclass(frozen=True)
class SourceFile:
    path: Path  # where to read it
    shown: str  # how findings name it
    named: bool = False  # named on the command line: parsed even if it cannot hold a finding


@dataclass
class Expansion:
    files: list[SourceFile] = field(default_factory=list)
    problems: list[InputProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # where an SGLang target was read from


def is_sglang_spec(text: str) -> bool:
    return text == "sglang" or text.startswith(("sglang==", "sglang:"))


def expand(targets: Sequence[str], progress: Callable[[str], None] | None = None, cwd: Path | None = None) -> Expansion:
    """Each target in order; a path that exists is a path (`./sglang` is a directory, not the
    installed SGLang). A target that cannot be read is a problem and the others go on."""
    here = (cwd or Path.cwd()).resolve()
    out = Expansion()
    seen: set[Path] = set()
    for text in targets:
        path = Path(text).expanduser()
        if path.exists():
            _add_path(out, path, text, here, None, seen)
        elif is_sglang_spec(text):
            _add_sglang(out, text, here, progress, seen)
        else:
            out.problems.append(InputProblem(text, "no such file or directory"))
    return out


def _add_sglang(out: Expansion, text: str, here: Path, progress: Callable[[str], None] | None, seen: set[Path]) -> None:
    try:
        spec = parse_target(text)
        assert spec is not None  # only `model` parses to None
        tree = locate_tree(spec, progress)
    except UsageError as exc:
        out.problems.append(InputProblem(text, _reason(str(exc), text)))
        return
    if tree.path.is_file():
        _add_path(out, tree.path, text, here, None, seen)
        return
    runtime = tree.path / SGLANG_RUNTIME
    # A checkout is the user's own: named as its files are. An installed or cached release is
    # named from its package (`sglang/srt/...`), as in SGLang's source tree.
    base = None if tree.origin == "path" else tree.path
    out.notes.append(f"{text}: SGLang {tree.version}, {runtime}")
    _add_path(out, runtime, text, here, base, seen)


def _reason(message: str, text: str) -> str:
    """locate's messages are written for --target; as a TARGET's reason, drop that framing."""
    for prefix in ("--target: ", "--target ", f"{text}: ", "sglang: "):
        message = message.removeprefix(prefix)
    return message.replace("(--target ", "(")


def _add_path(out: Expansion, path: Path, text: str, here: Path, base: Path | None, seen: set[Path]) -> None:
    if path.is_dir():
        files = sorted(_walk(path))
    elif path.suffix == ".py" or _has_python_shebang(path):
        files = [path]
    else:
        out.problems.append(InputProblem(text, "not a Python file (lint reads .py files)"))
        return
    for file in files:
        real = file.resolve()
        if real in seen:
            continue
        seen.add(real)
        out.files.append(SourceFile(file, _shown(file, here, base), named=not path.is_dir()))


def _walk(root: Path) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):  # symlinked directories are not entered
        here = Path(dirpath)
        dirnames[:] = [
            d
            for d in dirnames
            if not d.startswith(".") and d not in SKIPPED_DIRS and not (here / d / "pyvenv.cfg").exists()
        ]
        found.extend(here / name for name in filenames if name.endswith(".py"))
    return found


def _has_python_shebang(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def _shown(file: Path, here: Path, base: Path | None) -> str:
    absolute = file.absolute()
    for root in (base, here):
        if root is not None:
            try:
                return absolute.relative_to(root.absolute()).as_posix()
            except ValueError:
                pass
    return absolute.as_posix() if file.is_absolute() else file.as_posix()
