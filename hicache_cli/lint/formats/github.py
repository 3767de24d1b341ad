"""GitHub Actions workflow commands: `::error file=F,line=N,...::message`, shown on the run and
on the pull request's diff."""

from __future__ import annotations

from hicache_cli.lint.findings import LintResult
from hicache_cli.lint.rules import RULES, level_of
from hicache_cli.workflow_commands import escape_data, escape_property


def render(result: LintResult) -> str:
    lines = []
    for f in result.findings:
        rule = RULES.get(f.rule)
        command = {"warning": "warning", "note": "notice"}.get(level_of(f), "error")
        title = f"{f.rule} {rule.name}" if rule is not None else f.rule
        props = f"file={escape_property(f.file)},line={f.line},endLine={f.last_line}"
        if f.column:
            props += f",col={f.column}"
            if f.last_line == f.line and f.end_column:
                props += f",endColumn={f.end_column}"
        props += f",title={escape_property(title)}"
        lines.append(f"::{command} {props}::{escape_data(f.message)}\n")
    return "".join(lines)
