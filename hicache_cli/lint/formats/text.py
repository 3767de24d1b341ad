"""`file:line:column: HC001 message`, one finding a line, as compilers and ruff print them."""

from __future__ import annotations

from hicache_cli.lint.findings import Finding, LintResult


def line(finding: Finding) -> str:
    column = f"{finding.column}:" if finding.column else ""
    note = " (note)" if finding.level == "note" else ""
    return f"{finding.file}:{finding.line}:{column} {finding.rule}{note} {finding.message}"


def render(result: LintResult) -> str:
    return "".join(line(f) + "\n" for f in result.findings)


def summary(result: LintResult) -> str:
    """One line for stderr: how many findings, by rule, in how many files, how fast."""
    counts: dict[str, int] = {}
    for f in result.findings:
        counts[f.rule] = counts.get(f.rule, 0) + 1
    by_rule = f" ({', '.join(f'{rule} {n}' for rule, n in sorted(counts.items()))})" if counts else ""
    found = f"{len(result.findings)} finding{'' if len(result.findings) == 1 else 's'}{by_rule}"
    files = f"{result.files} file{'' if result.files == 1 else 's'} ({result.parsed} analysed)"
    extra = f", {result.suppressed} suppressed" if result.suppressed else ""
    problems = f", {len(result.problems)} unreadable" if result.problems else ""
    problems += f", {len(result.warnings)} skipped" if result.warnings else ""
    return f"hicache lint: {found} in {files}{extra}{problems}, {result.seconds:.1f} s; rules {','.join(result.rules)}"
