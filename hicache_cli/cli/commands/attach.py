"""Attach to a running process: the Works it already holds, by holder; then trace it; then detach.
With --follow, stay (for days) at a cost it cannot measure, and name the holder and the line
of any population of Works that starts to grow."""

from __future__ import annotations

from dataclasses import replace

import typer

from hicache_cli.analysis.kinds import Status
from hicache_cli.cli import configure, options, running
from hicache_cli.cli.groups import grouped
from hicache_cli.cli.options import Follow, Measurement, Outputs, Progress
from hicache_cli.errors import EXIT_OK, EXIT_RUN_FAILED
from hicache_cli.execution import RunResult
from hicache_cli.lifecycle import exit_code_for
from hicache_cli.rundir import create_run_dir

ATTACH_DURATION = "60s"  # without --follow, when no --duration is given


@grouped
def attach(
    ctx: typer.Context,
    pids: list[int] = options.PIDS,
    no_census: bool = typer.Option(
        False, "--no-census", help="Skip the census of the Works already held (it holds the GIL: docs/attach.md)."
    ),
    follow: Follow = Follow.every(),
    measure: Measurement = Measurement.take(
        "warmup",
        "leak_threshold",
        duration=options.duration(
            None, f"Detach after this long (default {ATTACH_DURATION}; --follow: until stopped)."
        ),
        probe_hz=typer.Option(None, "--probe-hz", help="Samples per second per process (default 10; --follow: 1)."),
    ),
    outputs: Outputs = Outputs.take("run_dir", "report", "html", "json_output", run_dir=options.run_dir("attach")),
    progress: Progress = Progress.every(),
) -> None:
    """Attach to a running process: the Works it already holds, by holder; then trace it; then detach."""
    if measure.duration is None and not follow.follow:
        measure = replace(measure, duration=ATTACH_DURATION)
    config = configure.attach_config(pids or [], measure, census=not no_census, follow=follow)
    configure.check_run_options(outputs, progress)
    metrics = running.serve_metrics(ctx, progress.metrics_port, progress.metrics_host, config)
    directory = create_run_dir(outputs.run_dir, config.label, private=config.target.private_run_dir)
    result, console = running.observe(config, directory, progress, outputs, running.attached, metrics=metrics)
    running.print_end(result, console, outputs)
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
