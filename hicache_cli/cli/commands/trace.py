"""Watch any torch.distributed program for Works it never waits, and name where they come from."""

from __future__ import annotations

from pathlib import Path

import typer

from hicache_cli.cli import options, running
from hicache_cli.cli.configure import check_run_options
from hicache_cli.cli.output import print_json, write_html
from hicache_cli.errors import EXIT_RUN_FAILED
from hicache_cli.execution import RunResult
from hicache_cli.launch.trace_launcher import trace_config
from hicache_cli.lifecycle import exit_code_for
from hicache_cli.outcome import signal_name
from hicache_cli.present.progress import summary_table, verdict_lines
from hicache_cli.rundir import create_run_dir

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
    command: list[str] = options.COMMAND,
    duration: str = options.duration(None, "Stop the program after this long (default: let it run to its end)."),
    loop: str = options.LOOP,
    probe_hz: float = options.PROBE_HZ,
    warmup: str = options.WARMUP,
    leak_threshold: float = options.LEAK_THRESHOLD,
    stall_timeout: str = options.TRACE_STALL_TIMEOUT,
    run_dir: Path = options.run_dir("trace"),
    report: Path = options.REPORT,
    html: Path = options.HTML,
    no_live: bool = typer.Option(
        False, "--no-live", help="No dashboard: the program's output passes through, hicache's goes to stderr."
    ),
    refresh: float = options.REFRESH,
    metrics_port: int = options.METRICS_PORT,
    metrics_host: str = options.METRICS_HOST,
    json_output: bool = typer.Option(
        False,
        "--json",
        help="Print the report as one JSON document on stdout; hicache's text and the program's output go to stderr.",
    ),
) -> None:
    """Watch any torch.distributed program for Works it never waits, and name where they come from."""
    config = trace_config(command or [], loop, duration, probe_hz, warmup, leak_threshold, stall_timeout)
    check_run_options(refresh, report, None, metrics_port, metrics_host, html)
    metrics = running.serve_metrics(ctx, metrics_port, metrics_host, config)
    directory = create_run_dir(run_dir, "trace")
    result, console = running.run_traced(
        config, directory, no_live, refresh, report, json_output=json_output, metrics=metrics
    )
    console.print(summary_table(result.report, console.width))
    for line in verdict_lines(result.report):
        console.print(line)
    console.print(f"report: {result.report_path}")
    write_html(result.report, html, console)
    if json_output:
        print_json(result.report.to_dict())
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
