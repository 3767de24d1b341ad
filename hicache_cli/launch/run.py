"""One stress run end to end: run directory, launch, report. Shared by every command that runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hicache_cli.analysis.report import RunOutcome, build_report, write_report
from hicache_cli.analysis.results import Report
from hicache_cli.analysis.torchrun_log import WorkerExit, worker_exits_in
from hicache_cli.config import RunConfig
from hicache_cli.launch.launcher import EarlyStop, LaunchConfig, LaunchResult, launch
from hicache_cli.launch.nodes import NodeSpec
from hicache_cli.launch.trace_launcher import TraceLaunch, launch_traced
from hicache_cli.lifecycle import STOPS
from hicache_cli.protocol import STACKS_GLOB
from hicache_cli.sample import Sample
from hicache_cli.series import load_run
from hicache_cli.targets import TracedCommand


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    report_path: Path | None  # None on a node other than node 0: the report is written there
    report: Report | None
    launch: LaunchResult | None = None


def execute(
    stress: RunConfig,
    run_dir: Path,
    on_tick: Callable[[dict[int, list[Sample]], float], None],
    port: int | None = None,
    report_copy: Path | None = None,
    refresh_s: float = 0.5,
    early_stop: EarlyStop | None = None,
    nodes: NodeSpec | None = None,
    passthrough: bool = True,
    passthrough_to_stderr: bool = False,
) -> RunResult:
    """Launch the run in `run_dir`, wait for it, and write its report, whatever happened.

    `on_tick` gets the samples so far every `refresh_s` seconds. A traced program's output
    goes to ours with `passthrough` (its stdout to our stderr with `passthrough_to_stderr`),
    else to program.log in the run directory.
    """
    stress.save(run_dir)
    cpu_before = time.process_time()
    launched_wall = time.time()
    traced = isinstance(stress.target, TracedCommand)
    if traced:
        traced_launch = TraceLaunch(
            run_dir=run_dir,
            config=stress,
            passthrough=passthrough,
            to_stderr=passthrough_to_stderr,
            poll_interval_s=refresh_s,
        )
        result = launch_traced(traced_launch, on_tick, early_stop)
    else:
        launch_config = LaunchConfig(run_dir=run_dir, config=stress, port=port, poll_interval_s=refresh_s, nodes=nodes)
        result = launch(launch_config, on_tick, early_stop)
    with STOPS.finishing():  # a stop signal now must not cost the report
        return _write_up(stress, run_dir, result, report_copy, nodes, cpu_before, launched_wall)


def _write_up(
    stress: RunConfig,
    run_dir: Path,
    result: LaunchResult,
    report_copy: Path | None,
    nodes: NodeSpec | None,
    cpu_before: float,
    launched_wall: float,
) -> RunResult:
    _drop_empty_stack_files(run_dir)
    if nodes is not None and not nodes.is_head:
        return RunResult(run_dir, None, None, result)
    exits = worker_exits_in(run_dir)
    for rank, (code, sig) in result.remote_exits.items():
        exits.setdefault(rank, WorkerExit(rank, code, sig))
    traced = isinstance(stress.target, TracedCommand)
    outcome = RunOutcome(
        interrupted=result.interrupted,
        interrupted_by=result.interrupted_by,
        # a traced program stopped at its duration is not a failure; only the watchdog's stop is
        killed_reason=None if result.stalls or traced else result.reason,
        torchrun_exit_code=None if traced else result.exit_code,
        program_exit_code=result.exit_code if traced else None,
        program_stopped=result.reason if traced else None,
        wall_s=result.wall_s,
        launcher_cpu_s=time.process_time() - cpu_before,
        stalls=result.stalls,
        stopped_early=result.stopped_early,
        launched_wall=launched_wall,
        worker_exits=exits,
        lost_nodes=result.lost_nodes,
    )
    # what the launcher followed, to the last line: no second reading of a long run's files
    followed = result.followed if result.followed is not None else load_run(run_dir)
    report = build_report(stress, followed, outcome, run_dir)
    path = write_report(report, run_dir, report_copy)
    return RunResult(run_dir, path, report.at(path), result)


def _drop_empty_stack_files(run_dir: Path) -> None:
    """Every rank opens a stack file for the watchdog; only the ones written to matter."""
    for path in run_dir.glob(STACKS_GLOB):
        if path.stat().st_size == 0:
            path.unlink()
