"""Attach to a running process: the Works it already holds, by holder; then trace it; then detach."""

from __future__ import annotations

from pathlib import Path

import typer

from hicache_cli.analysis.kinds import Status
from hicache_cli.cli import options, running
from hicache_cli.cli.configure import check_run_options
from hicache_cli.cli.output import print_json, write_html
from hicache_cli.errors import EXIT_OK, EXIT_RUN_FAILED
from hicache_cli.execution import RunResult
from hicache_cli.launch.attach_launcher import attach_config
from hicache_cli.lifecycle import exit_code_for
from hicache_cli.present.progress import summary_table, verdict_lines
from hicache_cli.rundir import create_run_dir

ATTACH_DURATION = "60s"
ATTACH_EXAMPLES = """Examples:

  hicache attach 12345                      # a rank (or the server's launcher: every rank below it)

  hicache attach --duration 5m $(pgrep -f torchrun)

  hicache attach --json --no-live 12345 > attach.json

Needs gdb and permission to ptrace the process (same user, or CAP_SYS_PTRACE; containers:
--cap-add SYS_PTRACE). The process is never stopped for more than the injection, never
signalled, and runs on as it was after the detach. See docs/attach.md.
"""


def attach(
    ctx: typer.Context,
    pids: list[int] = options.PIDS,
    duration: str = options.duration(ATTACH_DURATION, "Detach after this long."),
    no_census: bool = options.NO_CENSUS,
    probe_hz: float = options.PROBE_HZ,
    warmup: str = options.WARMUP,
    leak_threshold: float = options.LEAK_THRESHOLD,
    run_dir: Path = options.run_dir("attach"),
    report: Path = options.REPORT,
    html: Path = options.HTML,
    no_live: bool = options.NO_LIVE,
    refresh: float = options.REFRESH,
    metrics_port: int = options.METRICS_PORT,
    metrics_host: str = options.METRICS_HOST,
    json_output: bool = options.JSON,
) -> None:
    """Attach to a running process: the Works it already holds, by holder; then trace it; then detach."""
    config = attach_config(pids or [], duration, probe_hz, warmup, leak_threshold, census=not no_census)
    check_run_options(refresh, report, None, metrics_port, metrics_host, html)
    metrics = running.serve_metrics(ctx, metrics_port, metrics_host, config)
    directory = create_run_dir(run_dir, config.label, private=config.target.private_run_dir)
    result, console = running.run_attached(
        config, directory, no_live, refresh, report, json_output=json_output, metrics=metrics
    )
    assert result.report is not None  # one machine: the report is written here
    console.print(summary_table(result.report, console.width))
    for line in verdict_lines(result.report):
        console.print(line)
    console.print(f"report: {result.report_path}")
    write_html(result.report, html, console)
    if json_output:
        print_json(result.report.to_dict())
    raise typer.Exit(attach_exit_code(result))


def attach_exit_code(result: RunResult) -> int:
    """0 once detached (at the duration, or every process ended by itself); 128 + N when
    hicache was stopped by signal N (it detached all the same); 3 when the run failed (an
    attached process crashed, an agent failed). The verdict is `check --pid`'s to gate."""
    report = result.report
    assert report is not None
    if report.interrupted:
        return exit_code_for(report.stop_signal)
    return EXIT_OK if report.status == Status.COMPLETED else EXIT_RUN_FAILED
