"""Find the HiCache leak's shape in source: async Works kept and never waited."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.text import Text

from hicache_cli.cli.configure import check_output_paths
from hicache_cli.cli.output import say, write_stdout
from hicache_cli.errors import EXIT_FINDING, EXIT_USAGE, UsageError
from hicache_cli.lint.engine import lint as run_lint
from hicache_cli.lint.formats import FORMATS
from hicache_cli.lint.formats.text import line, summary
from hicache_cli.lint.rules import RULES, default_rules, fails
from hicache_cli.present.progress import make_console, stdout_is_terminal
from hicache_cli.rundir import write_atomically

FORMAT_HELP = "Output: " + ", ".join(FORMATS) + "."
SELECT_HELP = (
    f"Rules to run, comma-separated or repeated: {', '.join(RULES)}, or all (default: {', '.join(default_rules())})."
)
WRAPPER_HELP = (
    "A module whose functions are torch.distributed's under the same names (repeatable; "
    "deepspeed.comm is known; also `wrappers` in pyproject.toml's \\[tool.hicache.lint])."  # \[: not rich markup
)


def lint(
    targets: list[str] = typer.Argument(
        None,
        metavar="TARGET",
        help="Files, directories (their .py files), or sglang, sglang==VERSION, sglang:PATH. Default: .",
    ),
    output_format: str = typer.Option("text", "--format", "-f", help=FORMAT_HELP),
    select: list[str] = typer.Option(None, "--select", help=SELECT_HELP),
    output: Path = typer.Option(None, "--output", "-o", help="Write the findings here instead of to stdout."),
    wrapper: list[str] = typer.Option(None, "--wrapper", metavar="MODULE", help=WRAPPER_HELP),
    diff: str = typer.Option(None, "--diff", metavar="REF", help="Only findings on lines changed since this git ref."),
) -> None:
    """Find async Works kept and never waited (the HiCache leak's shape), statically."""
    closed = sys.stdout is None  # started with stdout closed (`>&-`)
    if output_format not in FORMATS:
        raise UsageError(f"--format: unknown format {output_format!r}; choose one of: {', '.join(FORMATS)}")
    check_output_paths(output=output)
    result = run_lint(targets or ["."], select, say, wrapper or (), diff=diff)
    for problem in result.problems:
        print(f"hicache: error: {problem}", file=sys.stderr)
    for warning in result.warnings:
        print(f"hicache: warning: {warning}", file=sys.stderr)
    if output is not None:
        write_atomically(output, FORMATS[output_format](result))
    elif output_format == "text" and not closed and stdout_is_terminal():
        console = make_console(live=True)
        for finding in result.findings:
            location, _, rest = line(finding).partition(f" {finding.rule}")
            console.print(Text.assemble((location, "bold"), " ", (finding.rule, "bold red"), " ", rest), soft_wrap=True)
    else:
        write_stdout(FORMATS[output_format](result), closed)
    print(summary(result), file=sys.stderr)
    if result.problems:
        raise typer.Exit(EXIT_USAGE)
    if fails(result.findings):
        raise typer.Exit(EXIT_FINDING)
