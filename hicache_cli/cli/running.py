"""Running workloads from a command: one run with its progress view (the live dashboard
or plain lines, served as metrics too), a traced program, processes attached to, a series
of runs side by side (compare-policies, sglang-scan), and the exit code of an interrupted
run."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from hicache_cli.analysis.results import Report
from hicache_cli.attached import AttachedPid
from hicache_cli.cli.output import say
from hicache_cli.config import RunConfig
from hicache_cli.execution import RunResult, execute
from hicache_cli.launch.nodes import NodeSpec
from hicache_cli.launch.supervisor import EarlyStop, View
from hicache_cli.lifecycle import STOPS, exit_code_for
from hicache_cli.present.dashboard import Dashboard
from hicache_cli.present.metrics_exporter import MetricsExporter, beyond_loopback
from hicache_cli.present.progress import LiveView, PlainProgress, human_stream, make_console
from hicache_cli.present.trace_views import attached_lines
from hicache_cli.rundir import create_run_dir
from hicache_cli.tracer.protocol import PROGRAM_LOG


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
    plain = PlainProgress(config.duration_s, write=console.print)
    yield plain if metrics is None else metrics.feeding(plain)


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
    live = wants_live(no_live, json_output)
    console = make_console(live, to_stderr=json_output or not live)  # not live: stdout is the program's
    console.print(f"hicache {config.title()}")
    console.print(f"run directory: {directory}")
    if live:
        console.print(f"the program's output: {directory / PROGRAM_LOG}")
    # on a terminal the dashboard has it: the program's output goes to its log
    launch = {"passthrough": not live, "passthrough_to_stderr": json_output}
    return _observe(config, directory, console, live, refresh, report, early_stop, metrics, launch), console


def run_attached(
    config: RunConfig,
    directory: Path,
    no_live: bool,
    refresh: float,
    report: Path | None,
    early_stop: EarlyStop | None = None,
    json_output: bool = False,
    metrics: MetricsExporter | None = None,
) -> tuple[RunResult, Console]:
    """Attach to running processes (`attach`, `check --pid`): the dashboard on a terminal,
    plain lines off one; each process's census said as soon as it is read. Returns the
    result and the console hicache's output goes to (stderr under `--json`)."""
    live = wants_live(no_live, json_output)
    console = make_console(live, to_stderr=json_output)
    console.print(f"hicache {config.title()}; run directory {directory}")

    def attached(process: AttachedPid) -> None:
        for line in attached_lines(process):
            console.print(line)

    launch = {"on_attached": attached}
    return _observe(config, directory, console, live, refresh, report, early_stop, metrics, launch), console


def _observe(
    config: RunConfig,
    directory: Path,
    console: Console,
    live: bool,
    refresh: float,
    report: Path | None,
    early_stop: EarlyStop | None,
    metrics: MetricsExporter | None,
    launch: dict[str, Any],
) -> RunResult:
    """Someone else's processes (traced or attached to), followed with a progress view."""
    with progress_view(config, directory, console, live, metrics) as view:
        refresh_s = 1.0 / refresh if live else 0.5
        return execute(config, directory, view, report_copy=report, refresh_s=refresh_s, early_stop=early_stop,
                       **launch)  # fmt: skip


@dataclass(frozen=True)
class Step:
    """One run of a series: its name (its directory under the series'), and how to make its
    config, which may instead say why it is not run (not applicable)."""

    name: str
    prepare: Callable[[], RunConfig | str]


def run_series(
    steps: list[Step],
    parent: Path,
    console: Console,
    live: bool,
    detail: Callable[[RunConfig], str] = lambda config: "",
    summary: Callable[[Report], str] = lambda report: str(report.verdict),
) -> list[tuple[Step, RunConfig | str, Report | None]]:
    """Run each step in a directory of its own under `parent`, one after another, saying
    where the series is: `[2/5] drain ...`, then `summary(report)`; a step that is not run
    says why. Ends after a run that was interrupted. Returns each step taken, with its config
    (or why it was not run) and its report."""
    done: list[tuple[Step, RunConfig | str, Report | None]] = []
    for i, step in enumerate(steps, 1):
        where = f"[{i}/{len(steps)}] {step.name}"
        config = step.prepare()
        if isinstance(config, str):
            console.print(f"{where}: {config}")
            done.append((step, config, None))
            continue
        console.print(f"{where}{detail(config)} ...")
        result = run_with_progress(config, create_run_dir(parent / step.name, config.label), console, live)
        assert result.report is not None  # one machine: the report is written here
        done.append((step, config, result.report))
        console.print(f"{where}: {summary(result.report)}")
        if result.report.interrupted or STOPS.signal is not None:
            break
    return done
