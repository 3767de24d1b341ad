"""`hicache report build RUN_DIR`: the report rebuilt from a run directory's samples."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from hicache_cli.analysis.report import report_text, write_report
from hicache_cli.cli.configure import check_output_paths
from hicache_cli.errors import UsageError
from hicache_cli.execution import rebuild_report
from hicache_cli.present.progress import make_console, verdict_lines
from hicache_cli.protocol import REPORT_FILE
from hicache_cli.rundir import write_atomically


def build(
    run_dir: Path = typer.Argument(..., help="The run directory (hicache-runs/<time>-<policy>/)."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Where to write it; default: RUN_DIR/report.json, if the run wrote none."
    ),
) -> None:
    """The report rebuilt from a run directory's samples (after hicache was killed, or with a newer hicache)."""
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run directory")
    if output is None and os.path.lexists(run_dir / REPORT_FILE):
        # the run's own report says what only the launcher knew: never replaced unasked
        raise UsageError(f"{run_dir} already has its {REPORT_FILE}; name another file with --output")
    check_output_paths(output=output)
    report = rebuild_report(run_dir)
    if output is None:
        output = write_report(report, run_dir)  # a run directory's file: never through a link there
    else:
        write_atomically(output, report_text(report))
    console = make_console(live=False)
    for line in verdict_lines(report):
        console.print(line, soft_wrap=True)
    console.print(f"wrote {output}", soft_wrap=True)
