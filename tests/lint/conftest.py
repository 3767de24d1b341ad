"""Helpers for the lint tests: lint a snippet of source with chosen rules."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hicache_cli.lint.engine import lint_source
from hicache_cli.lint.findings import Finding
from hicache_cli.lint.rules import RULES


def lint_snippet(source: str, *rules: str, file: str = "snippet.py") -> list[Finding]:
    """Findings in `source` (dedented) from `rules` (default: every rule)."""
    chosen = [RULES[r] for r in rules] if rules else list(RULES.values())
    findings, _ = lint_source(textwrap.dedent(source), file, chosen)
    return findings


def rule_lines(source: str, *rules: str) -> list[tuple[str, int]]:
    return [(f.rule, f.line) for f in lint_snippet(source, *rules)]


def line_of(source: str, marker: str) -> int:
    """The 1-based line of the first line of dedented `source` containing `marker`."""
    for number, text in enumerate(textwrap.dedent(source).splitlines(), 1):
        if marker in text:
            return number
    raise AssertionError(f"{marker!r} not in the source")


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Write `files` (relative path -> dedented source) below root; returns root."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root
