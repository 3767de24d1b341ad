"""Lint source text, files and targets: the public entry points, returning typed results."""

from __future__ import annotations

import ast
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from hicache_cli.errors import UsageError
from hicache_cli.lint.analysis import analyse
from hicache_cli.lint.config import LintConfig, make_config, read_settings
from hicache_cli.lint.findings import Finding, Followed, InputProblem, LintResult
from hicache_cli.lint.gitdiff import changed_lines, touches
from hicache_cli.lint.rules import RULES, Context, Rule, default_rules
from hicache_cli.lint.solve import Solution
from hicache_cli.lint.suppress import suppressions
from hicache_cli.lint.targets import SourceFile, Unreadable, expand, read_source


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
    source: str | bytes,
    file: str = "<source>",
    rules: Sequence[type[Rule]] | None = None,
    module: str = "",
    config: LintConfig | None = None,
) -> tuple[list[Finding], int]:
    """Findings in one module's source, and how many were suppressed. Raises SyntaxError (and
    ValueError for a null byte) when it does not parse."""
    data = source.encode() if isinstance(source, str) else source
    ast.parse(data, file)  # raises as the docstring says
    path = Path(file if file.endswith(".py") else f"{module or Path(file).stem}.py")
    result = LintResult(rules=[r.id for r in (rules if rules is not None else [RULES[r] for r in default_rules()])])
    _lint_program(
        [SourceFile(path, file, named=True, root=None)],
        [data],
        result,
        rules if rules is not None else [RULES[r] for r in default_rules()],
        config or make_config(),
    )
    if result.problems:
        raise SyntaxError(result.problems[0].reason)
    return sorted(result.findings), result.suppressed


def lint_files(
    files: Sequence[SourceFile], rules: Sequence[type[Rule]], config: LintConfig | None = None
) -> LintResult:
    """Each program's files (one per path target group, one per SGLang spec) analysed as one."""
    result = LintResult(rules=[rule.id for rule in rules])
    programs: dict[str, list[SourceFile]] = {}
    for source in files:
        programs.setdefault(source.program, []).append(source)
    for members in programs.values():
        readable, datas = [], []
        for source in members:
            result.files += 1
            try:
                datas.append(read_source(source.path))
                readable.append(source)
            except Unreadable as exc:
                problem = InputProblem(source.shown, str(exc))
                (result.problems if source.named else result.warnings).append(problem)
        if readable:
            _lint_program(readable, datas, result, rules, config or make_config())
    result.findings.sort(key=lambda f: (f.file, f.line, f.rule, f.column))
    return result


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Python's cyclic collector walks every live object each time it runs its oldest generation:
    with a large module's AST and graph alive (millions of objects, no reference cycles worth
    collecting) that made the lint superlinear in a file's size (~40% of the time at 10 MB).
    Reference counting still frees everything as usual."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _lint_program(
    files: list[SourceFile], datas: list[bytes], result: LintResult, rules: Sequence[type[Rule]], config: LintConfig
) -> None:
    with _no_cyclic_gc():
        _lint_analysed(files, datas, result, rules, config)


def _lint_analysed(
    files: list[SourceFile], datas: list[bytes], result: LintResult, rules: Sequence[type[Rule]], config: LintConfig
) -> None:
    analysis = analyse(
        [f.path for f in files],
        [f.root for f in files],
        [f.shown for f in files],
        datas,
        [f.named for f in files],
        config,
    )
    for failure in analysis.failures:
        result.problems.append(InputProblem(files[failure.mid].shown, failure.reason))
    result.parsed += len(analysis.walked) - len({f.mid for f in analysis.failures})
    assert analysis.solution is not None
    ctx = Context(analysis.solution, [f.shown for f in files])
    by_file = {f.shown: i for i, f in enumerate(files)}
    tables: dict[int, object] = {}
    found: set[Finding] = set()
    for rule in rules:
        for finding in rule().check(ctx):
            mid = by_file[finding.file]
            if mid not in tables:
                tables[mid] = suppressions(datas[mid])
            if finding.silenced_by(tables[mid]):  # type: ignore[arg-type]
                result.suppressed += 1
                continue
            found.add(finding)
    result.findings.extend(found)
    result.followed.extend(_followed(analysis.solution, [f.shown for f in files]))


def _followed(solution: Solution, shown: list[str]) -> Iterator[Followed]:
    active = {id(o) for o in solution.active}
    for origin in solution.graph.origins:
        kind = "work" if id(origin) in active else "sync"
        yield Followed(shown[origin.mid], origin.span.line, origin.span.end_line, kind, origin.api)
    for mid, span, api in solution.graph.no_work:
        yield Followed(shown[mid], span.line, span.end_line, "none", api)
    for call in solution.graph.calls:
        site = call.site
        yield Followed(shown[site.mid], site.span.line, site.span.end_line, "call", site.text)


def lint(
    targets: Sequence[str],
    select: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
    wrappers: Sequence[str] = (),
    cwd: Path | None = None,
    diff: str | None = None,
) -> LintResult:
    """Lint TARGETs: files, directories (their .py files), `sglang`, `sglang==VER`, `sglang:PATH`.
    Targets that cannot be read are `problems`, directory entries skipped are `warnings`; the
    others are linted all the same. pyproject.toml's [tool.hicache.lint] (nearest the working
    directory) adds wrapper modules and the default selection. `diff`: keep only findings on
    lines changed since that git ref (the whole program is still analysed)."""
    started = time.monotonic()
    here = (cwd or Path.cwd()).resolve()
    settings = read_settings(here)
    rules = select_rules(select if select else settings.select)
    config = make_config(wrappers, settings)
    changed = changed_lines(diff, here) if diff is not None else None
    expansion = expand(targets, progress, cwd)
    for note in expansion.notes:
        if progress is not None:
            progress(note)
    result = lint_files(expansion.files, rules, config)
    if changed is not None:
        where = {f.shown: f.path for f in expansion.files}
        result.findings = [f for f in result.findings if touches(changed, where[f.file], f.line, f.last_line)]
    result.problems = expansion.problems + result.problems
    result.warnings = expansion.warnings + result.warnings
    if settings.warning:
        result.warnings.append(InputProblem("pyproject.toml", settings.warning))
    result.seconds = time.monotonic() - started
    return result
