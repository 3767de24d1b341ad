"""SARIF 2.1.0, as GitHub code scanning takes it (`github/codeql-action/upload-sarif`): one run,
the rules that ran as the tool's rules, one result per finding with its physical location
(lines and columns) and the other places it names (relatedLocations: where the Work is kept,
where it is only polled);
targets that could not be read are the invocation's notifications."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import PurePosixPath
from urllib.parse import quote

from hicache_cli.lint.findings import Finding, LintResult
from hicache_cli.lint.rules import RULES, level_of

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _tool_version() -> str:
    try:
        return metadata.version("hicache")
    except metadata.PackageNotFoundError:
        return "0"


def _uri(file: str) -> str:
    """A relative path stays relative (GitHub resolves it against the checkout); an absolute one
    becomes a file:// URI."""
    path = PurePosixPath(file)
    return path.as_uri() if path.is_absolute() else quote(file)


def _rule(rule_id: str) -> dict[str, object]:
    rule = RULES[rule_id]
    return {
        "id": rule.id,
        "name": rule.name,
        "shortDescription": {"text": rule.summary()},
        "fullDescription": {"text": rule.explanation() or rule.summary()},
        "help": {"text": rule.explanation() or rule.summary()},
        "defaultConfiguration": {"level": rule.level},
        "properties": {"tags": ["torch.distributed", "memory-leak" if rule.id == "HC001" else "correctness"]},
    }


def _region(line: int, column: int, end_line: int, end_column: int) -> dict[str, int]:
    region = {"startLine": line, "endLine": max(line, end_line)}
    if column:
        region["startColumn"] = column
    if end_column:
        region["endColumn"] = end_column + 1  # SARIF's end column is exclusive
    return region


def _result(f: Finding, index: dict[str, int]) -> dict[str, object]:
    return {
        "ruleId": f.rule,
        "ruleIndex": index[f.rule],
        "level": level_of(f),
        "message": {"text": f.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": _uri(f.file)},
                    "region": _region(f.line, f.column, f.last_line, f.end_column),
                },
                "logicalLocations": [{"fullyQualifiedName": f.function, "kind": "function"}],
            }
        ],
        "relatedLocations": [
            {
                "id": i,
                "message": {"text": r.message},
                "physicalLocation": {
                    "artifactLocation": {"uri": _uri(r.file)},
                    "region": _region(r.line, r.column, r.line, 0),
                },
            }
            for i, r in enumerate(f.related, 1)
        ],
    }


def as_dict(result: LintResult) -> dict[str, object]:
    index = {rule_id: i for i, rule_id in enumerate(result.rules)}
    results = [_result(f, index) for f in result.findings]
    notifications = [
        {
            "level": "error",
            "message": {"text": str(p)},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(p.target)}}}],
        }
        for p in result.problems
    ]
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "hicache",
                        "version": _tool_version(),
                        "rules": [_rule(r) for r in result.rules],
                    }
                },
                "invocations": [
                    {"executionSuccessful": not result.problems, "toolExecutionNotifications": notifications}
                ],
                "results": results,
            }
        ],
    }


def render(result: LintResult) -> str:
    return json.dumps(as_dict(result), indent=2) + "\n"
