"""Running workloads from a command: one run with its progress view (the live dashboard
or plain lines, served as metrics too), a traced program, processes attached to, a series
of runs side by side (compare-policies, sglang-scan), what a run says at its end and the exit
code of an interrupted run; and following a run directory (watch)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from hicache_cli.analysis.results import Report
from hicache_cli.attached import AttachedPid
from hicache_cli.cli.options import Outputs, Progress
from hicache_cli.cli.output import print_json, say, write_html
from hicache_cli.config import RunConfig
from hicache_cli.execution import RunResult, execute
from hicache_cli.launch.nodes import NodeSpec
from hicache_cli.launch.supervisor import EarlyStop, View
from hicache_cli.lifecycle import STOPS, exit_code_for
from hicache_cli.present.dashboard import Dashboard
from hicache_cli.present.metrics_exporter import MetricsExporter, beyond_loopback
from hicache_cli.present.progress import (
    LiveView,
    PlainProgress,
    human_stream,
    make_console,
    summary_table,
    verdict_lines,
)
from hicache_cli.present.trace_views import attached_lines
from hicache_cli.protocol import REPORT_FILE
from hicache_cli.sample import Sample
from hicache_cli.series import RunFollower
from hicache_cli.tracer.protocol import PROGRAM_LOG
from hicache_cli.units import format_bytes


def print_end(result: RunResult, console: Console, outputs: Outputs, note: str | None = None) -> None:
    """What a run says at its end: the result table, each verdict, `note`, where the report
    is; then the page (`--html`) and the JSON document (`--json`)."""
    report = result.report
    assert report is not None  # this machine wrote the report
    console.print(summary_table(report, console.width))
    for line in verdict_lines(report):
        console.print(line)
    if note is not None:
        console.print(note)
    console.print(f"report: {result.report_path}")
    write_html(report, outputs.html, console)
    if outputs.json_output:
        print_json(report.to_dict())


def exit_if_interrupted(*reports: Report) -> None:
    """Exit 128 + the signal when a run was stopped from outside, or hicache was asked to
    stop while it wrote its report; otherwise return."""
    for report in reports:
        if report.interrupted:
            raise typer.Exit(exit_code_for(report.stop_signal))
    if STOPS.signal is not None:
        raise typer.Exit(STOPS.exit_code())


def wants_live(no_live: bool, json_output: bool = False) -> bool:
    """The live dashboard, on the terminal human text goes to (stderr under `--json`)."""
    return not no_live and human_stream(json_output).isatty()


def serve_metrics(ctx: typer.Context, port: int | None, host: str | None, config: RunConfig) -> MetricsExporter | None:
    """With --metrics-port: the endpoint, bound now (a busy port fails before a run directory
    exists) and closed when the command ends, however it ends."""
    if port is None:
        return None
    exporter = MetricsExporter.start(host, port, config, run_dir="")
    ctx.call_on_close(exporter.close)
    if host is not None and beyond_loopback(host):
        say(
            f"warning: --metrics-host {host} serves every rank's metrics (RSS, work-list depth, latency, "
            f"the run directory's name) at {exporter.url} to anyone who can reach it, without authentication"
        )
    return exporter


def run_with_progress(
    config: RunConfig,
    directory: Path,
    console: Console,
    live: bool,
    refresh: float = 4.0,
    port: int | None = None,
    report_copy: Path | None = None,
    early_stop: EarlyStop | None = None,
    nodes: NodeSpec | None = None,
    metrics: MetricsExporter | None = None,
) -> RunResult:
    """One workload, shown live on a terminal or as plain lines otherwise (and served as
    metrics, with `metrics`)."""
    with progress_view(config, directory, console, live, metrics) as view:
        refresh_s = 1.0 / refresh if live else 0.5
        return execute(config, directory, view, port, report_copy, refresh_s, early_stop=early_stop, nodes=nodes)


@contextlib.contextmanager
def progress_view(
    config: RunConfig, directory: Path, console: Console, live: bool, metrics: MetricsExporter | None
) -> Iterator[View]:
    """What a run feeds while it goes: the live dashboard on a terminal, plain lines
    otherwise; the metrics endpoint too, with `metrics` (its URL said first)."""
    if metrics is not None:
        metrics.run_dir = str(directory)
        console.print(f"metrics: {metrics.url}")
    if live:
        with LiveView(Dashboard(config, str(directory)), console) as live_view:
            yield live_view if metrics is None else metrics.feeding(live_view)
        return
    plain = PlainProgress(config.duration_s, config.target.progress_every_s, write=console.print)
    yield plain if metrics is None else metrics.feeding(plain)


# How someone else's processes are opened: the console hicache speaks on, and what execute()
# is told (given the config, the run directory, whether the view is live, whether --json).
Opening = Callable[[RunConfig, Path, bool, bool], tuple[Console, dict[str, Any]]]


def observe(
    config: RunConfig,
    directory: Path,
    progress: Progress,
    outputs: Outputs,
    opening: Opening,
    early_stop: EarlyStop | None = None,
    metrics: MetricsExporter | None = None,
) -> tuple[RunResult, Console]:
    """Someone else's processes (a program traced, processes attached to: `opening` says
    which), followed with the dashboard on a terminal and plain lines off one. Returns the
    result and the console hicache's own output goes to."""
    live = wants_live(progress.no_live, outputs.json_output)
    console, launch = opening(config, directory, live, outputs.json_output)
    with progress_view(config, directory, console, live, metrics) as view:
        # off a terminal no faster than samples come (a follow's: one a second)
        refresh_s = 1.0 / progress.refresh if live else max(0.5, 1.0 / config.probe_hz)
        result = execute(config, directory, view, report_copy=outputs.report, refresh_s=refresh_s,
                         early_stop=early_stop, **launch)  # fmt: skip
    return result, console


def traced(config: RunConfig, directory: Path, live: bool, json_output: bool) -> tuple[Console, dict[str, Any]]:
    """A program under the tracer: on a terminal its output goes to its log (the dashboard
    has the terminal); off one it passes through (to stderr under `--json`, whose document is
    stdout's), and hicache speaks on stderr."""
    console = make_console(live, to_stderr=json_output or not live)  # not live: stdout is the program's
    console.print(f"hicache {config.title()}")
    console.print(f"run directory: {directory}")
    if live:
        console.print(f"the program's output: {directory / PROGRAM_LOG}")
    return console, {"passthrough": not live, "passthrough_to_stderr": json_output}


def attached(config: RunConfig, directory: Path, live: bool, json_output: bool) -> tuple[Console, dict[str, Any]]:
    """Processes attached to (`attach`, `check --pid`): each one's census said as soon as it
    is read; hicache speaks on stderr under `--json`."""
    console = make_console(live, to_stderr=json_output)
    console.print(f"hicache {config.title()}; run directory {directory}")

    def census(process: AttachedPid) -> None:
        for line in attached_lines(process):
            console.print(line)

    return console, {"on_attached": census}


# -- following a run directory (watch) --------------------------------------------------------

STALE_S = 15.0  # no new sample for this long and no report: the run is gone
CATCH_UP_BYTES = 32 << 20  # of rank files read between two refreshes while catching up (~100k lines, a few s)


def follow(run_dir: Path, config: RunConfig, view: View, refresh_s: float, note: Callable[[str], None] = print) -> str:
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
