"""Watch any torch.distributed program for Works it never waits, and name where they come from."""

from __future__ import annotations

import typer

from hicache_cli.cli import configure, options, running
from hicache_cli.cli.groups import grouped
from hicache_cli.cli.options import Measurement, Outputs, Progress
from hicache_cli.errors import EXIT_RUN_FAILED
from hicache_cli.execution import RunResult
from hicache_cli.lifecycle import exit_code_for
from hicache_cli.outcome import signal_name
from hicache_cli.rundir import create_run_dir


@grouped
def trace(
    ctx: typer.Context,
    command: list[str] = options.COMMAND,
    loop: str = options.LOOP,
    measure: Measurement = Measurement.every(
        duration=options.duration(None, "Stop the program after this long (default: let it run to its end)."),
        stall_timeout=typer.Option(
            configure.TRACE_STALL_TIMEOUT,
            "--stall-timeout",
            help="With --loop: a call running longer is a stall: stacks dumped, program stopped. Any process "
            "that makes no progress for longer, to its end, is said to be stuck.",
        ),
    ),
    outputs: Outputs = Outputs.take(
        "run_dir",
        "report",
        "html",
        run_dir=options.run_dir("trace"),
        json_output=typer.Option(
            False,
            "--json",
            help="Print the report as one JSON document on stdout; hicache's text and the program's output go to "
            "stderr.",
        ),
    ),
    progress: Progress = Progress.every(
        no_live=typer.Option(
            False, "--no-live", help="No dashboard: the program's output passes through, hicache's goes to stderr."
        )
    ),
) -> None:
    """Watch any torch.distributed program for Works it never waits, and name where they come from."""
    config = configure.trace_config(command or [], loop, measure)
    configure.check_run_options(outputs, progress)
    metrics = running.serve_metrics(ctx, progress.metrics_port, progress.metrics_host, config)
    directory = create_run_dir(outputs.run_dir, "trace")
    result, console = running.observe(config, directory, progress, outputs, running.traced, metrics=metrics)
    running.print_end(result, console, outputs)
    raise typer.Exit(trace_exit_code(result))


def trace_exit_code(result: RunResult) -> int:
    """The program's own exit code when it ended by itself (128 + N for signal N); 0 when
    hicache stopped it at --duration; 128 + N when hicache was stopped by signal N; 3 when
    the watchdog had to stop it."""
    report = result.report
    assert report is not None  # a trace runs on one machine: its report is written here
    if report.interrupted:
        return exit_code_for(report.stop_signal)
    launched = result.outcome
    if launched is not None and launched.stalls:
        return EXIT_RUN_FAILED
    if launched is not None and launched.killed:
        return 0
    code = report.program_exit_code
    if code is None:
        return EXIT_RUN_FAILED
    return exit_code_for(signal_name(code)) if code < 0 else code
