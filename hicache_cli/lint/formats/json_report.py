"""`{"findings": [{"rule", "level", "file", "line", "column", "end_line", "end_column", "function",
"message", "related": [{"file", "line", "column", "message"}]}], "problems": [...], ...}`."""

from __future__ import annotations

import json

from hicache_cli.lint.findings import Finding, LintResult
from hicache_cli.lint.rules import level_of

SCHEMA_VERSION = 2  # 2: columns, ends, level, related places, warnings


def finding_dict(f: Finding) -> dict[str, object]:
    return {
        "rule": f.rule,
        "level": level_of(f),
        "file": f.file,
        "line": f.line,
        "column": f.column,
        "end_line": f.last_line,
        "end_column": f.end_column,
        "function": f.function,
        "message": f.message,
        "related": [{"file": r.file, "line": r.line, "column": r.column, "message": r.message} for r in f.related],
    }


def as_dict(result: LintResult) -> dict[str, object]:
    return {
        "schema_version": SCHEMA_VERSION,
        "findings": [finding_dict(f) for f in result.findings],
        "problems": [{"target": p.target, "reason": p.reason} for p in result.problems],
        "warnings": [{"target": p.target, "reason": p.reason} for p in result.warnings],
        "rules": result.rules,
        "files": result.files,
        "analysed": result.parsed,
        "suppressed": result.suppressed,
    }


def render(result: LintResult) -> str:
    return json.dumps(as_dict(result), indent=2) + "\n"
