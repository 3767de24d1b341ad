"""Attach the dashboard to a run directory: a run in progress, or one that has finished."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from hicache_cli.analysis.report import load_report
from hicache_cli.cli import configure, running
from hicache_cli.cli.groups import grouped
from hicache_cli.cli.options import Outputs, Progress
from hicache_cli.config import RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.present.progress import make_console, stdout_is_terminal, summary_table, verdict_lines
from hicache_cli.protocol import CONFIG_FILE, REPORT_FILE


@grouped
def watch(
    ctx: typer.Context,
    run_dir: Path = typer.Argument(..., help="The run directory (hicache-runs/<time>-<policy>/)."),
    progress: Progress = Progress.every(refresh=typer.Option(4.0, "--refresh", help="Refreshes per second.")),
) -> None:
    """Attach the dashboard to a run directory: a run in progress, or one that has finished."""
    if not os.path.lexists(run_dir / CONFIG_FILE):
        raise UsageError(f"{run_dir}: not a run directory (no {CONFIG_FILE})")
    configure.check_run_options(Outputs(), progress)
    config = RunConfig.load(run_dir)
    metrics = running.serve_metrics(ctx, progress.metrics_port, progress.metrics_host, config)
    live = not progress.no_live and stdout_is_terminal()
    console = make_console(live)
    with running.progress_view(config, run_dir, console, live, metrics) as view:
        why = running.follow(run_dir, config, view, 1.0 / progress.refresh, console.print)
    console.print(f"watch ended: {why}")
    if (run_dir / REPORT_FILE).exists():
        report = load_report(run_dir / REPORT_FILE)
        console.print(summary_table(report, console.width))
        for line in verdict_lines(report):
            console.print(line)
