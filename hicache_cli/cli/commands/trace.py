"""Watch any torch.distributed program for Works it never waits, and name where they come from."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from hicache_cli.cli.commands import common
from hicache_cli.config import RunConfig
from hicache_cli.errors import EXIT_RUN_FAILED
from hicache_cli.execution import RunResult, execute
from hicache_cli.launch.supervisor import EarlyStop
from hicache_cli.launch.trace_launcher import trace_config
from hicache_cli.lifecycle import exit_code_for
from hicache_cli.outcome import signal_name
from hicache_cli.present.dashboard import Dashboard
from hicache_cli.present.metrics_exporter import MetricsExporter
from hicache_cli.present.progress import LiveView, PlainProgress, make_console, summary_table, verdict_lines
from hicache_cli.rundir import create_run_dir
from hicache_cli.tracer.protocol import PROGRAM_LOG

# Options shared with `check -- COMMAND` (typer reads these, never changes them).
COMMAND = typer.Argument(None, metavar="-- COMMAND [ARGS]...", help="The program to run and watch, after --.")
LOOP = typer.Option(
    None,
    "--loop",
    help="MODULE:QUALNAME of a function the program calls once per round (e.g. a scheduler step): "
    "gives rounds/s, loop latency and stall detection.",
)
TRACE_STALL_TIMEOUT = typer.Option(
    "60s", "--stall-timeout", help="With --loop: a call running longer is a stall: stacks dumped, program stopped."
)
TRACE_EXAMPLES = """Examples:

  hicache trace -- torchrun --nproc-per-node 2 train.py

  hicache trace --duration 2m -- python -m sglang.launch_server --pp-size 2 --enable-hierarchical-cache ...

  hicache trace -- python spawn_workers.py          # torch.multiprocessing.spawn: every rank

  hicache trace --no-live -- python -m pytest tests/dist

Every Python process below COMMAND that starts a torch.distributed process group is
observed, without a change to the program. See docs/trace.md.
"""


def trace(
    ctx: typer.Context,
    command: list[str] = COMMAND,
    duration: str = typer.Option(
        None, "--duration", "-d", help="Stop the program after this long (default: let it run to its end)."
    ),
    loop: str = LOOP,
    probe_hz: float = common.PROBE_HZ,
    warmup: str = common.WARMUP,
    leak_threshold: float = typer.Option(
        100.0, "--leak-threshold", help="RSS slope in MB/h above which RSS counts as growing."
    ),
    stall_timeout: str = TRACE_STALL_TIMEOUT,
    run_dir: Path = typer.Option(None, "--run-dir", help="Run directory (default ./hicache-runs/<time>-trace/)."),
    report: Path = typer.Option(None, "--report", help="Also write the JSON report here."),
    no_live: bool = typer.Option(
        False, "--no-live", help="No dashboard: the program's output passes through, hicache's goes to stderr."
    ),
    refresh: float = common.REFRESH,
    metrics_port: int = common.METRICS_PORT,
    metrics_host: str = common.METRICS_HOST,
    json_output: bool = typer.Option(
        False,
        "--json",
        help="Print the report as one JSON document on stdout; hicache's text and the program's output go to stderr.",
    ),
) -> None:
    """Watch any torch.distributed program for Works it never waits, and name where they come from."""
    config = trace_config(command or [], loop, duration, probe_hz, warmup, leak_threshold, stall_timeout)
    common.check_run_options(refresh, report, None, metrics_port, metrics_host)
    metrics = common.serve_metrics(ctx, metrics_port, metrics_host, config)
    directory = create_run_dir(run_dir, "trace")
    result, console = run_traced(config, directory, no_live, refresh, report, json_output=json_output, metrics=metrics)
    console.print(summary_table(result.report, console.width))
    for line in verdict_lines(result.report):
        console.print(line)
    console.print(f"report: {result.report_path}")
    if json_output:
        common.print_json(result.report.to_dict())
    raise typer.Exit(trace_exit_code(result))


def run_traced(
    config: RunConfig,
    directory: Path,
    no_live: bool,
    refresh: float,
    report: Path | None,
    early_stop: EarlyStop | None = None,
    json_output: bool = False,
    metrics: MetricsExporter | None = None,
) -> tuple[RunResult, Console]:
    """Run the program under the tracer: on a terminal with the dashboard (the program's
    output kept in the run directory), else passing its output through (to stderr under
    `--json`, whose document is stdout's). Returns the result and the console hicache's own
    output goes to."""
    live = common.wants_live(no_live, json_output)
    console = make_console(live, to_stderr=json_output or not live)  # not live: stdout is the program's
    console.print(f"hicache {config.title()}")
    console.print(f"run directory: {directory}")
    if metrics is not None:
        metrics.run_dir = str(directory)
        console.print(f"metrics: {metrics.url}")
    if live:
        console.print(f"the program's output: {directory / PROGRAM_LOG}")
        with LiveView(Dashboard(config, str(directory)), console) as live_view:
            view = live_view if metrics is None else metrics.feeding(live_view)
            result = execute(
                config,
                directory,
                view,
                report_copy=report,
                refresh_s=1.0 / refresh,
                early_stop=early_stop,
                passthrough=False,
            )
    else:
        plain = PlainProgress(config.duration_s, write=console.print)
        view = plain if metrics is None else metrics.feeding(plain)
        result = execute(
            config,
            directory,
            view,
            report_copy=report,
            early_stop=early_stop,
            passthrough=True,
            passthrough_to_stderr=json_output,
        )
    return result, console


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
