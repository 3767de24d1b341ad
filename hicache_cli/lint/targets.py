"""What to read: TARGETs (files, directories, SGLang specs) -> Python files, and the targets
that cannot be read, each with one line saying why.

Readers are total: a named target that cannot be read is a problem (exit 2); an entry found
while walking a directory that cannot be read (a symlink loop, a FIFO, a socket or a device
named `*.py`, a broken link, no permission) is skipped with a warning and the rest are linted.
A file's type is checked before it is opened, and it is opened non-blocking and checked again,
so nothing here ever waits on a FIFO's writer.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hicache_cli.errors import UsageError
from hicache_cli.lint.findings import InputProblem
from hicache_cli.sglang_target.locate import locate_tree, parse_target

# Directories a walk does not enter: hidden ones (.git, .venv, .tox), caches, virtualenvs.
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules"})
SGLANG_RUNTIME = Path("sglang") / "srt"  # what `lint sglang...` reads: SGLang's runtime
FILES = "files"  # the program the files named on the command line make together


@dataclass(frozen=True)
class SourceFile:
    path: Path  # where to read it
    shown: str  # how findings name it
    named: bool = False  # named on the command line: parsed even if it cannot hold a finding
    root: Path | None = None  # the directory target it was found under (module names below it)
    program: str = FILES  # files of one program are analysed together: a directory target, an
    # SGLang target, or all the files named


@dataclass
class Expansion:
    files: list[SourceFile] = field(default_factory=list)
    problems: list[InputProblem] = field(default_factory=list)
    warnings: list[InputProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # where an SGLang target was read from


class Unreadable(Exception):
    """A file that cannot be read as source; str() is the one-line reason."""


def is_sglang_spec(text: str) -> bool:
    return text == "sglang" or text.startswith(("sglang==", "sglang:"))


def kind_of(mode: int) -> str | None:
    """What a non-regular, non-directory file is, in words; None for a regular file or a directory."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _why(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a symlink loop"
    if exc.errno == errno.ENOENT:
        return "a broken symlink" if exc.filename and os.path.islink(exc.filename) else "no such file or directory"
    return exc.strerror or str(exc)


def read_source(path: Path) -> bytes:
    """The bytes of a regular file; raises Unreadable (never blocks on a FIFO or a device)."""
    try:
        before = os.stat(path)
    except OSError as exc:
        raise Unreadable(f"cannot be read: {_why(exc)}") from None
    if (kind := kind_of(before.st_mode)) is not None or stat.S_ISDIR(before.st_mode):
        raise Unreadable(f"skipped: {kind or 'a directory'}, not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise Unreadable(f"cannot be read: {_why(exc)}") from None
    try:
        if (kind := kind_of(os.fstat(fd).st_mode)) is not None:  # replaced since the stat
            raise Unreadable(f"skipped: {kind}, not a regular file")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise Unreadable(f"cannot be read: {_why(exc)}") from None
    finally:
        os.close(fd)


def expand(targets: Sequence[str], progress: Callable[[str], None] | None = None, cwd: Path | None = None) -> Expansion:
    """Each target in order; a path that exists is a path (`./sglang` is a directory, not the
    installed SGLang). A target that cannot be read is a problem and the others go on."""
    here = (cwd or Path.cwd()).resolve()
    out = Expansion()
    seen: set[str] = set()
    for text in targets:
        path = Path(text).expanduser()
        try:
            os.lstat(path)
            present = True
        except OSError:
            present = False
        except ValueError:  # a NUL in the name
            out.problems.append(InputProblem(text.replace("\0", "\\0"), "no such file or directory"))
            continue
        if present:
            _add_path(out, path, text, here, None, seen, f"dir:{text}" if path.is_dir() else FILES)
        elif is_sglang_spec(text):
            _add_sglang(out, text, here, progress, seen)
        else:
            out.problems.append(InputProblem(text, "no such file or directory"))
    return out


def _add_sglang(out: Expansion, text: str, here: Path, progress: Callable[[str], None] | None, seen: set[str]) -> None:
    try:
        spec = parse_target(text)
        assert spec is not None  # only `model` parses to None
        tree = locate_tree(spec, progress)
    except UsageError as exc:
        out.problems.append(InputProblem(text, _reason(str(exc), text)))
        return
    if tree.path.is_file():
        _add_path(out, tree.path, text, here, None, seen, text)
        return
    runtime = tree.path / SGLANG_RUNTIME
    # A checkout is the user's own: named as its files are. An installed or cached release is
    # named from its package (`sglang/srt/...`), as in SGLang's source tree.
    base = None if tree.origin == "path" else tree.path
    out.notes.append(f"{text}: SGLang {tree.version}, {runtime}")
    _add_path(out, runtime, text, here, base, seen, text)


def _reason(message: str, text: str) -> str:
    """locate's messages are written for --target; as a TARGET's reason, drop that framing."""
    for prefix in ("--target: ", "--target ", f"{text}: ", "sglang: "):
        message = message.removeprefix(prefix)
    return message.replace("(--target ", "(")


def _add_path(
    out: Expansion, path: Path, text: str, here: Path, base: Path | None, seen: set[str], program: str
) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        out.problems.append(InputProblem(text, f"cannot be read: {_why(exc)}"))
        return
    if stat.S_ISDIR(mode):
        files, skipped = _walk(path)
        out.warnings.extend(InputProblem(_shown(p, here, base), why) for p, why in skipped)
        named, root = False, path
    elif (kind := kind_of(mode)) is not None:
        out.problems.append(InputProblem(text, f"{kind}, not a regular file"))
        return
    elif path.suffix == ".py" or _has_python_shebang(path):
        files, named, root = [path], True, path.parent
    else:
        out.problems.append(InputProblem(text, "not a Python file (lint reads .py files)"))
        return
    for file in files:
        real = os.path.realpath(file)
        if real in seen:
            continue
        seen.add(real)
        out.files.append(SourceFile(file, _shown(file, here, base), named=named, root=root, program=program))


def _walk(root: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """The regular `.py` files below `root`, sorted, and the `.py` entries skipped, with why."""
    found: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    for dirpath, dirnames, filenames in os.walk(root):  # symlinked directories are not entered
        here = Path(dirpath)
        dirnames[:] = [
            d
            for d in dirnames
            if not d.startswith(".") and d not in SKIPPED_DIRS and not (here / d / "pyvenv.cfg").exists()
        ]
        for name in filenames:
            if not name.endswith(".py"):
                continue
            path = here / name
            try:
                mode = os.stat(path).st_mode
            except OSError as exc:
                skipped.append((path, f"skipped: {_why(exc)}"))
                continue
            if (kind := kind_of(mode)) is not None:
                skipped.append((path, f"skipped: {kind}, not a regular file"))
            elif stat.S_ISREG(mode):
                found.append(path)
    return sorted(found), sorted(skipped)


def _has_python_shebang(path: Path) -> bool:
    try:
        first = read_source(path)[:200].split(b"\n", 1)[0]
    except Unreadable:
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
