"""Find the HiCache leak's shape in source: async Works kept and never waited."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.text import Text

from hicache_cli.cli.configure import check_output_paths
from hicache_cli.cli.output import say
from hicache_cli.errors import EXIT_FINDING, EXIT_USAGE, UsageError
from hicache_cli.lint.engine import lint as run_lint
from hicache_cli.lint.formats import FORMATS
from hicache_cli.lint.formats.text import line, summary
from hicache_cli.lint.rules import RULES, default_rules
from hicache_cli.present.progress import make_console, stdout_is_terminal
from hicache_cli.rundir import write_atomically

RULE_LINES = "\n\n".join(
    f"{rule_id}: {cls.summary() if cls.default else cls.summary().rstrip('.') + ' (off by default).'}"
    for rule_id, cls in RULES.items()
)

LINT_EXAMPLES = f"""Rules:

{RULE_LINES}

Examples:

  hicache lint src/                               # every .py file below src/

  hicache lint sglang==0.5.14                     # a release's sglang/srt: HC001 in its HiCache files

  hicache lint sglang:~/src/sglang --format sarif -o lint.sarif   # a checkout, for code scanning

  hicache lint . --select all                     # every rule, HC002 included

Silence one finding with a trailing `# hicache: ignore[HC001]` on its line.
Exit codes: 0 no findings, 1 findings, 2 a target that cannot be read (the others are still linted).
"""

FORMAT_HELP = "Output: " + ", ".join(FORMATS) + "."
SELECT_HELP = (
    f"Rules to run, comma-separated or repeated: {', '.join(RULES)}, or all (default: {', '.join(default_rules())})."
)


def lint(
    targets: list[str] = typer.Argument(
        None,
        metavar="TARGET",
        help="Files, directories (their .py files), or sglang, sglang==VERSION, sglang:PATH. Default: .",
    ),
    output_format: str = typer.Option("text", "--format", "-f", help=FORMAT_HELP),
    select: list[str] = typer.Option(
        None,
        "--select",
        help=SELECT_HELP,
    ),
    output: Path = typer.Option(None, "--output", "-o", help="Write the findings here instead of to stdout."),
) -> None:
    """Find async Works kept and never waited (the HiCache leak's shape), statically."""
    if output_format not in FORMATS:
        raise UsageError(f"--format: unknown format {output_format!r}; choose one of: {', '.join(FORMATS)}")
    check_output_paths(output=output)
    result = run_lint(targets or ["."], select, say)
    for problem in result.problems:
        print(f"hicache: error: {problem}", file=sys.stderr)
    if output is not None:
        write_atomically(output, FORMATS[output_format](result))
    elif output_format == "text" and stdout_is_terminal():
        console = make_console(live=True)
        for finding in result.findings:
            location, _, rest = line(finding).partition(f" {finding.rule} ")
            console.print(Text.assemble((location, "bold"), " ", (finding.rule, "bold red"), " ", rest), soft_wrap=True)
    else:
        sys.stdout.write(FORMATS[output_format](result))
        sys.stdout.flush()
    print(summary(result), file=sys.stderr)
    if result.problems:
        raise typer.Exit(EXIT_USAGE)
    if result.findings:
        raise typer.Exit(EXIT_FINDING)
