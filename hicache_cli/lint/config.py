"""What the lint is told: modules that stand for torch.distributed (known wrappers, `--wrapper`,
`[tool.hicache.lint]` in pyproject.toml), and torch.distributed's own names under any module
that defines them."""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hicache_cli.errors import UsageError

DIST = "torch.distributed"
# Where torch.distributed's functions are defined; a name imported from there is the same function.
DIST_MODULES = ("torch.distributed.distributed_c10d", "torch.distributed.c10d")
# Modules whose functions are torch.distributed's under the same names.
DEFAULT_WRAPPERS = ("deepspeed.comm",)
PYPROJECT = "pyproject.toml"
SECTION = "[tool.hicache.lint]"


@dataclass(frozen=True)
class LintConfig:
    wrappers: tuple[str, ...] = DEFAULT_WRAPPERS

    def canonical(self, qualname: str) -> str:
        return _canonical(self.wrappers, qualname)

    def is_wrapper(self, dotted: str) -> bool:
        return _is_wrapper(self.wrappers, dotted)


@functools.lru_cache(maxsize=65536)
def _canonical(wrappers: tuple[str, ...], qualname: str) -> str:
    """`torch.distributed.distributed_c10d.isend` and `deepspeed.comm.isend` (or any module
    below a wrapper: `deepspeed.comm.comm.isend`) -> `torch.distributed.isend`."""
    for prefix in DIST_MODULES:
        if qualname.startswith(prefix + "."):
            return DIST + qualname[len(prefix) :]
    for wrapper in wrappers:
        if qualname == wrapper:
            return DIST
        if qualname.startswith(wrapper + "."):
            return DIST + "." + qualname.rsplit(".", 1)[1]
    return qualname


@functools.lru_cache(maxsize=65536)
def _is_wrapper(wrappers: tuple[str, ...], dotted: str) -> bool:
    return any(dotted == w or dotted.startswith(w + ".") for w in wrappers)


def _read_toml(path: Path) -> tuple[dict[str, Any], str | None]:
    """The file's table, and a warning when it cannot be read here (no tomllib on 3.10)."""
    try:
        text = path.read_bytes()
    except OSError:
        return {}, None
    if b"tool.hicache" not in text:
        return {}, None
    try:
        import tomllib  # Python 3.11 on
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            return {}, f"{path}: {SECTION} not read: needs Python 3.11 (tomllib) or the tomli package"
    try:
        return tomllib.loads(text.decode("utf-8")), None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above `start`."""
    for folder in [start, *start.parents]:
        candidate = folder / PYPROJECT
        if candidate.is_file():
            return candidate
    return None


@dataclass(frozen=True)
class Settings:
    """What pyproject.toml's [tool.hicache.lint] says (each None when it says nothing)."""

    wrappers: tuple[str, ...] = ()
    select: tuple[str, ...] | None = None
    warning: str | None = None  # the table could not be read here


def read_settings(start: Path) -> Settings:
    path = find_pyproject(start)
    if path is None:
        return Settings()
    data, warning = _read_toml(path)
    table = data.get("tool", {}).get("hicache", {}).get("lint", {})
    if not isinstance(table, dict):
        raise UsageError(f"{path}: {SECTION} must be a table")
    unknown = sorted(set(table) - {"wrappers", "select"})
    if unknown:
        raise UsageError(f"{path}: {SECTION}: unknown key {', '.join(unknown)} (known: wrappers, select)")
    wrappers = _strings(table.get("wrappers", []), path, "wrappers")
    select = _strings(table["select"], path, "select") if "select" in table else None
    return Settings(tuple(wrappers), tuple(select) if select is not None else None, warning)


def _strings(value: object, path: Path, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise UsageError(f"{path}: {SECTION} {key} must be a list of strings")
    return list(value)


def make_config(wrappers: Sequence[str] = (), settings: Settings | None = None) -> LintConfig:
    """The defaults, then pyproject's wrappers, then `--wrapper`'s; each a dotted module name."""
    chosen = [*DEFAULT_WRAPPERS, *(settings.wrappers if settings else ()), *wrappers]
    for name in chosen:
        if not all(part.isidentifier() for part in name.split(".")):
            raise UsageError(f"--wrapper: {name!r} is not a dotted module name")
    return LintConfig(tuple(dict.fromkeys(chosen)))


def python_has_tomllib() -> bool:
    return sys.version_info >= (3, 11)
