"""Lint source text, files and targets: the public entry points, returning typed results."""

from __future__ import annotations

import ast
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from hicache_cli.errors import UsageError
from hicache_cli.lint.analyze import analyze
from hicache_cli.lint.findings import Finding, InputProblem, LintResult
from hicache_cli.lint.names import ModuleIndex, module_name
from hicache_cli.lint.rules import RULES, Rule, default_rules
from hicache_cli.lint.suppress import is_suppressed, suppressions
from hicache_cli.lint.targets import SourceFile, expand

# Every rule starts from a Work-creating call; a file without one of these words cannot hold a
# finding, so a directory's other files are read but not parsed (SGLang's srt/: 9 of 2,141).
TRIGGER = re.compile(rb"isend|irecv|async_op")


def select_rules(select: Sequence[str] | None) -> list[type[Rule]]:
    """`None`: the default rules; `["all"]`: every rule; else the ids named (comma lists too)."""
    if not select:
        return [RULES[r] for r in default_rules()]
    wanted = [part.strip().upper() for item in select for part in item.split(",") if part.strip()]
    if "ALL" in wanted:
        return list(RULES.values())
    unknown = [r for r in wanted if r not in RULES]
    if unknown or not wanted:
        raise UsageError(f"--select: unknown rule {', '.join(unknown) or '(none)'}; rules: {', '.join(RULES)}, all")
    return [RULES[r] for r in dict.fromkeys(wanted)]


def lint_source(
    source: str | bytes, file: str = "<source>", rules: Sequence[type[Rule]] | None = None, module: str = ""
) -> tuple[list[Finding], int]:
    """Findings in one module's source, and how many were suppressed. Raises SyntaxError (and
    ValueError for a null byte) when it does not parse."""
    data = source.encode() if isinstance(source, str) else source
    tree = ast.parse(data, file)
    index = ModuleIndex.of(tree, module or Path(file).stem, Path(file).name == "__init__.py")
    flow = analyze(tree, index)
    silenced = suppressions(data)
    findings, suppressed = [], 0
    for rule in rules if rules is not None else [RULES[r] for r in default_rules()]:
        for raw in rule().check(flow):
            if is_suppressed(silenced, rule.id, raw.line, max(raw.line, raw.end_line)):
                suppressed += 1
                continue
            findings.append(Finding(file, raw.line, rule.id, raw.function, raw.message, raw.end_line))
    return sorted(set(findings)), suppressed


def lint_files(files: Sequence[SourceFile], rules: Sequence[type[Rule]]) -> LintResult:
    result = LintResult(rules=[rule.id for rule in rules])
    for source in files:
        result.files += 1
        try:
            data = source.path.read_bytes()
        except OSError as exc:
            result.problems.append(InputProblem(source.shown, f"cannot be read: {exc.strerror or exc}"))
            continue
        if not source.named and not TRIGGER.search(data):
            continue
        try:
            found, suppressed = lint_source(data, source.shown, rules, module_name(source.path))
        except SyntaxError as exc:
            where = f" (line {exc.lineno})" if exc.lineno else ""
            result.problems.append(InputProblem(source.shown, f"does not parse: {exc.msg}{where}"))
            continue
        except ValueError as exc:  # a null byte, a bad encoding declaration
            result.problems.append(InputProblem(source.shown, f"does not parse: {exc}"))
            continue
        except RecursionError:
            result.problems.append(InputProblem(source.shown, "too deeply nested to parse or analyse"))
            continue
        result.parsed += 1
        result.findings.extend(found)
        result.suppressed += suppressed
    return result


def lint(
    targets: Sequence[str],
    select: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> LintResult:
    """Lint TARGETs: files, directories (their .py files), `sglang`, `sglang==VER`, `sglang:PATH`.
    Targets that cannot be read are `problems`; the others are linted all the same."""
    started = time.monotonic()
    rules = select_rules(select)
    expansion = expand(targets, progress)
    for note in expansion.notes:
        if progress is not None:
            progress(note)
    result = lint_files(expansion.files, rules)
    result.problems = expansion.problems + result.problems
    result.findings.sort(key=lambda f: (f.file, f.line, f.rule))
    result.seconds = time.monotonic() - started
    return result
