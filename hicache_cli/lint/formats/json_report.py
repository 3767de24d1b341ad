"""`{"findings": [{"rule", "file", "line", "function", "message"}], "problems": [...], ...}`."""

from __future__ import annotations

import json

from hicache_cli.lint.findings import LintResult

SCHEMA_VERSION = 1


def as_dict(result: LintResult) -> dict[str, object]:
    return {
        "schema_version": SCHEMA_VERSION,
        "findings": [
            {"rule": f.rule, "file": f.file, "line": f.line, "function": f.function, "message": f.message}
            for f in result.findings
        ],
        "problems": [{"target": p.target, "reason": p.reason} for p in result.problems],
        "rules": result.rules,
        "files": result.files,
        "analysed": result.parsed,
        "suppressed": result.suppressed,
    }


def render(result: LintResult) -> str:
    return json.dumps(as_dict(result), indent=2) + "\n"
