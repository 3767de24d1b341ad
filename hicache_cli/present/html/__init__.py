"""One self-contained HTML page per run (or compare-policies / sglang-scan bundle): the
verdicts, charts over time as inline SVG, the sites, failures and environment. Opens
offline; makes no request. `render` is a pure function of the typed report; `write_page`
writes it where hicache may write (see docs/report.md#the-page)."""

from __future__ import annotations

from pathlib import Path

from hicache_cli.analysis.bundles import Bundle
from hicache_cli.analysis.results import Report
from hicache_cli.errors import UsageError
from hicache_cli.present.html.page import GENERATOR, render
from hicache_cli.rundir import output_problem, write_atomically

__all__ = ["check_page_output", "default_output", "render", "write_page"]

_SNIFF = 1024  # the generator tag is in the page's first few hundred bytes


def default_output(source: Path) -> Path:
    """Beside what was read: report.json -> report.html, compare.json -> compare.html; a run
    directory's page is in it (report.html, or compare.html / scan.html for a bundle's)."""
    return source.with_suffix(".html")


def check_page_output(path: Path, option: str = "-o") -> None:
    """Raise UsageError unless `path` can take a page: its directory exists, and it is new or
    a page hicache wrote (a file hicache did not create is never replaced). `option` is the
    one the refusal tells the user to choose another file with."""
    if (problem := output_problem(path)) is not None:
        raise UsageError(f"cannot write {path}: {problem}")
    if path.exists() and not _is_our_page(path):
        raise UsageError(
            f"{path} exists and is not a page hicache wrote; remove it or choose another file with {option}"
        )


def _is_our_page(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            head = fh.read(_SNIFF)
    except OSError:
        return False
    return f'<meta name="generator" content="{GENERATOR} '.encode() in head


def write_page(doc: Report | Bundle, path: Path) -> Path:
    """Render `doc` and write it to `path` whole (rundir.write_atomically), after
    check_page_output; returns `path`. What `--html FILE` on a command calls."""
    check_page_output(path)
    write_atomically(path, render(doc))
    return path
