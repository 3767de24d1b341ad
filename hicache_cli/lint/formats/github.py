"""GitHub Actions workflow commands: `::error file=F,line=N,...::message`, shown on the run and
on the pull request's diff."""

from __future__ import annotations

from hicache_cli.lint.findings import LintResult
from hicache_cli.lint.rules import RULES


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def render(result: LintResult) -> str:
    lines = []
    for f in result.findings:
        rule = RULES.get(f.rule)
        command = "warning" if rule is not None and rule.level == "warning" else "error"
        title = f"{f.rule} {rule.name}" if rule is not None else f.rule
        props = f"file={_property(f.file)},line={f.line},endLine={f.last_line},title={_property(title)}"
        lines.append(f"::{command} {props}::{_data(f.message)}\n")
    return "".join(lines)
