"""Attach the dashboard to a run directory: a run in progress, or one that has finished."""

from __future__ import annotations

import os
import time
from pathlib import Path

import typer

from hicache_cli.analysis.report import load_report
from hicache_cli.cli import options, running
from hicache_cli.config import RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.present.metrics_exporter import check_metrics_options
from hicache_cli.present.progress import (
    make_console,
    stdout_is_terminal,
    summary_table,
    verdict_lines,
)
from hicache_cli.protocol import CONFIG_FILE, REPORT_FILE
from hicache_cli.sample import Sample
from hicache_cli.series import RunFollower
from hicache_cli.units import format_bytes

STALE_S = 15.0  # no new sample for this long and no report: the run is gone
CATCH_UP_BYTES = 32 << 20  # of rank files read between two refreshes while catching up (~100k lines, a few s)


def follow(run_dir: Path, config: RunConfig, view, refresh_s: float, note=print) -> str:  # noqa: ANN001
    """Feed `view` until the run ends; returns why following stopped. What was written
    before watch started is read CATCH_UP_BYTES at a time, refreshing the view between
    reads (a day-long run's files take minutes to read) and saying so with `note`."""
    follower = RunFollower(run_dir)
    started = time.monotonic()
    last_growth, last_count = started, -1
    backlog = follower.backlog()
    if backlog > CATCH_UP_BYTES:
        note(f"reading {format_bytes(backlog)} of samples already written; the view follows as they are read")
    while True:
        samples = follower.poll(CATCH_UP_BYTES)
        now = time.monotonic()
        view(samples, now - started)
        if not follower.caught_up:
            last_growth = now
            continue
        count = sum(series.totals.samples for series in follower.run.ranks.values())  # kept ones are bounded
        if count != last_count:
            last_growth, last_count = now, count
        if (run_dir / REPORT_FILE).exists():
            return "finished"
        if _all_final(samples, config.expected_ranks):
            return "all ranks stopped"
        if now - last_growth > STALE_S:
            return f"no new samples for {STALE_S:.0f} s and no report: the run seems to have stopped"
        time.sleep(refresh_s)


def _all_final(samples: dict[int, list[Sample]], expected: int | None) -> bool:
    """Every rank wrote its final line; a trace (None: ranks come as the program starts
    them) needs at least one."""
    enough = len(samples) >= (expected or 1)
    return enough and all(s and s[-1].kind == "final" for s in samples.values())


def watch(
    ctx: typer.Context,
    run_dir: Path = typer.Argument(..., help="The run directory (hicache-runs/<time>-<policy>/)."),
    no_live: bool = typer.Option(False, "--no-live", help="Plain progress lines instead of the live dashboard."),
    refresh: float = typer.Option(4.0, "--refresh", help="Refreshes per second."),
    metrics_port: int = options.METRICS_PORT,
    metrics_host: str = options.METRICS_HOST,
) -> None:
    """Attach the dashboard to a run directory: a run in progress, or one that has finished."""
    if not os.path.lexists(run_dir / CONFIG_FILE):
        raise UsageError(f"{run_dir}: not a run directory (no {CONFIG_FILE})")
    if not 0.2 <= refresh <= 20:
        raise UsageError(f"--refresh must be between 0.2 and 20 per second, got {refresh}")
    check_metrics_options(metrics_port, metrics_host)
    config = RunConfig.load(run_dir)
    metrics = running.serve_metrics(ctx, metrics_port, metrics_host, config)
    live = not no_live and stdout_is_terminal()
    console = make_console(live)
    with running.progress_view(config, run_dir, console, live, metrics) as view:
        why = follow(run_dir, config, view, 1.0 / refresh, console.print)
    console.print(f"watch ended: {why}")
    if (run_dir / REPORT_FILE).exists():
        report = load_report(run_dir / REPORT_FILE)
        console.print(summary_table(report, console.width))
        for line in verdict_lines(report):
            console.print(line)
