"""What a command writes besides its own text: progress notes on stderr, the one JSON
document on stdout (`--json`), lint's findings on stdout, the GitHub step summary, the page
(`--html`)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from hicache_cli.analysis.bundles import Bundle
from hicache_cli.analysis.results import Report
from hicache_cli.errors import UsageError
from hicache_cli.files import append_regular
from hicache_cli.present.github import STEP_SUMMARY_ENV
from hicache_cli.present.html import write_page
from hicache_cli.present.progress import ensure_stdout


def say(message: str) -> None:
    """Progress of work done before a run starts (fetching a release), on stderr."""
    typer.echo(f"hicache: {message}", err=True)


def print_json(document: dict[str, Any]) -> None:
    """`--json`: the one JSON document on stdout. A reader that went away (`| head`) is no
    error: the run's files are written anyway."""
    ensure_stdout()
    try:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit would fail again


def append_step_summary(markdown: str) -> None:
    """On GitHub Actions ($GITHUB_STEP_SUMMARY set): add `markdown` to the step's summary,
    appended to the file GitHub names, never replacing it. A summary that cannot be written
    is a warning: the command's result stands."""
    path = os.environ.get(STEP_SUMMARY_ENV)
    if not path:
        return
    try:
        append_regular(path, (markdown + "\n").encode("utf-8"))  # a FIFO there would block the command's end
    except OSError as exc:
        say(f"warning: cannot add to the step summary {path}: {exc.strerror or exc}")


def write_html(doc: Report | Bundle, path: Path | None, console: Console) -> None:
    """`--html FILE`: the page of what the command wrote, said where as `report:` is. Its
    path was checked before the run (configure.check_html); one that cannot take the page
    now (a file put there meanwhile, a full disk) is a warning: the run's result and its
    exit code stand, and `hicache report html` draws the page later."""
    if path is None:
        return
    try:
        console.print(f"html: {write_page(doc, path)}", soft_wrap=True)
    except UsageError as exc:
        say(f"warning: --html: {exc}")


def write_stdout(text: str, closed: bool) -> None:
    """`text` (lint's findings) on stdout. One that cannot take them (closed, a full disk, /dev/full) is an
    error of its own (exit 2: never 1, which means findings); a reader that went away (`| head`)
    is not: what it read is what it wanted."""
    if not text:
        return
    if closed or sys.stdout is None:
        raise UsageError("cannot write the findings to stdout: it is closed")
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _drop_stdout()
    except (OSError, ValueError) as exc:  # ValueError: a stdout closed by the time it is written
        _drop_stdout()
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"cannot write the findings to stdout: {reason}") from None


def _drop_stdout() -> None:
    """Point fd 1 at /dev/null, so Python's own flush at exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
