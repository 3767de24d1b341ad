"""One module per output format; each turns a LintResult into the text written to stdout.
FORMATS is the registry the CLI's `--format` choices come from."""

from __future__ import annotations

from collections.abc import Callable

from hicache_cli.lint.findings import LintResult
from hicache_cli.lint.formats import github, json_report, sarif, text

FORMATS: dict[str, Callable[[LintResult], str]] = {
    "text": text.render,
    "json": json_report.render,
    "sarif": sarif.render,
    "github": github.render,
}
