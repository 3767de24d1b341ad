"""One run end to end: the run directory's config, the target's strategy followed by the
supervisor, the report written whatever happened. The API and every command that runs call
`execute`; `hicache report build` calls `rebuild_report`, the same report from a run
directory alone.

Which strategy runs a target is decided here, by its type (`strategy_for`): a new kind of
target adds a line to it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hicache_cli import stacks
from hicache_cli.analysis.report import build_report, write_report
from hicache_cli.analysis.results import Rebuilt, Report
from hicache_cli.config import RunConfig
from hicache_cli.errors import ReportNotWritten, UsageError
from hicache_cli.launch.attach_launcher import AttachedProcesses, AttachLaunch, OnAttached
from hicache_cli.launch.follow_launcher import FollowedProcesses
from hicache_cli.launch.launcher import LaunchConfig, TorchrunRanks
from hicache_cli.launch.nodes import NodeSpec
from hicache_cli.launch.supervisor import EarlyStop, Strategy, follow
from hicache_cli.launch.torchrun_log import worker_exits_in
from hicache_cli.launch.trace_launcher import TracedProgram, TraceLaunch
from hicache_cli.lifecycle import STOPS
from hicache_cli.outcome import RunOutcome
from hicache_cli.protocol import CONFIG_FILE, STACKS_GLOB
from hicache_cli.records import replace
from hicache_cli.sample import Sample
from hicache_cli.series import load_run
from hicache_cli.targets import AttachedProcess, FollowedProcess, ModelTarget, SGLangTarget, TracedCommand
from hicache_cli.version import hicache_version


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    report_path: Path | None  # None on a node other than node 0: the report is written there
    report: Report | None
    outcome: RunOutcome | None = None


@dataclass(frozen=True)
class Launch:
    """How to launch, besides the config: one machine's port or a node's part across nodes;
    a traced program's output passed through (its stdout to our stderr) or kept; who hears of
    each attached process's census."""

    port: int | None = None
    nodes: NodeSpec | None = None
    passthrough: bool = True
    passthrough_to_stderr: bool = False
    refresh_s: float = 0.5
    on_attached: OnAttached | None = None


def _ranks(config: RunConfig, run_dir: Path, launch: Launch) -> Strategy:
    return TorchrunRanks(
        LaunchConfig(run_dir, config, port=launch.port, poll_interval_s=launch.refresh_s, nodes=launch.nodes)
    )


def _program(config: RunConfig, run_dir: Path, launch: Launch) -> Strategy:
    return TracedProgram(TraceLaunch(run_dir, config, launch.passthrough, launch.passthrough_to_stderr))


def _attached(config: RunConfig, run_dir: Path, launch: Launch) -> Strategy:
    return AttachedProcesses(AttachLaunch(run_dir, config, launch.on_attached))


def _followed(config: RunConfig, run_dir: Path, launch: Launch) -> Strategy:
    return FollowedProcesses(AttachLaunch(run_dir, config, launch.on_attached))


# Each kind of target's strategy, by its kind (targets.KINDS): the one place a kind picks how it runs.
STRATEGIES: dict[str, Callable[[RunConfig, Path, Launch], Strategy]] = {
    ModelTarget.kind: _ranks,
    SGLangTarget.kind: _ranks,
    TracedCommand.kind: _program,
    AttachedProcess.kind: _attached,
    FollowedProcess.kind: _followed,
}


def strategy_for(config: RunConfig, run_dir: Path, launch: Launch) -> Strategy:
    """The supervisor's strategy for the config's kind of target."""
    return STRATEGIES[config.target.kind](config, run_dir, launch)


def execute(
    config: RunConfig,
    run_dir: Path,
    on_tick: Callable[[dict[int, list[Sample]], float], None],
    port: int | None = None,
    report_copy: Path | None = None,
    refresh_s: float = 0.5,
    early_stop: EarlyStop | None = None,
    nodes: NodeSpec | None = None,
    passthrough: bool = True,
    passthrough_to_stderr: bool = False,
    on_attached: OnAttached | None = None,
) -> RunResult:
    """Launch the run in `run_dir`, follow it, and write its report, whatever happened.

    `on_tick` gets the samples so far every `refresh_s` seconds. A traced program's output
    goes to ours with `passthrough` (its stdout to our stderr with `passthrough_to_stderr`),
    else to program.log in the run directory. `on_attached` hears of each process an attach
    tried, as soon as its census is read.
    """
    config.save(run_dir)
    cpu_before = time.process_time()
    launch = Launch(port, nodes, passthrough, passthrough_to_stderr, refresh_s, on_attached)
    strategy = strategy_for(config, run_dir, launch)
    outcome = follow(strategy, on_tick, early_stop, refresh_s)
    with STOPS.finishing():  # a stop signal now must not cost the report
        _tidy_stack_files(run_dir)
        if nodes is not None and not nodes.is_head:
            return RunResult(run_dir, None, None, outcome)
        outcome = outcome.with_run(launcher_cpu_s=time.process_time() - cpu_before)
        # what the supervisor followed, to the last line: no second reading of a long run's files
        followed = outcome.followed if outcome.followed is not None else load_run(run_dir)
        report = build_report(config, followed, outcome, run_dir)
        try:
            path = write_report(report, run_dir, report_copy)
        except UsageError as exc:
            raise ReportNotWritten(str(exc), report) from None
        return RunResult(run_dir, path, report.at(path), outcome)


# Fields of a report that the launching hicache alone knew. Estimated: the launch time is
# config.json's modification time (written just before the launch) and the end the last
# sample's, so wall_s and startup_s are close but not the launcher's. Unknown (null): the
# CPU the launcher used, torchrun's or the program's exit status, why hicache stopped the
# program or the run early, and a stop signal sent to hicache itself. Not found again:
# the watchdog's stall and hang failures, which it decided from the clock while the run
# went on (rank exits torchrun logged are read back), and an attach's census.
ESTIMATED = ("wall_s", "startup_s")
UNKNOWN = (
    "launcher_cpu_s",
    "torchrun_exit_code",
    "program_exit_code",
    "program_stopped",
    "stopped_early",
    "interruption (a signal to hicache)",
    "failures found by the watchdog (stall, hang)",
)


def rebuild_report(run_dir: Path) -> Report:
    """The report of the run in `run_dir` from its config.json and rank files alone: after
    hicache was killed before it wrote one, or to judge an old run again with a newer
    hicache. Everything it says of the ranks comes from their samples, through the same
    build_report a run's end calls, so it is the report the run would have written; what
    only the launching hicache knew is estimated or null, and its `rebuilt` names those."""
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run directory")
    config_path = run_dir / CONFIG_FILE
    if not os.path.lexists(config_path):
        raise UsageError(f"{run_dir}: not a run directory (no {CONFIG_FILE})")
    config = RunConfig.load(run_dir)  # (it reads the flat config of an older hicache too)
    run = load_run(run_dir)
    if not any(run.samples.values()):
        raise UsageError(f"{run_dir}: no samples to build a report from (no rank-N.jsonl with a complete line)")
    launched = os.lstat(config_path).st_mtime
    last = max(s[-1].wall for s in run.samples.values() if s)
    outcome = RunOutcome(
        exit_code=None,
        wall_s=max(0.0, last - launched),
        launcher_cpu_s=None,
        launched_wall=launched,
        worker_exits=worker_exits_in(run_dir),
    )
    unknown = UNKNOWN + config.target.launcher_only
    rebuilt = Rebuilt(
        at=round(time.time(), 3), hicache_version=hicache_version(), estimated=list(ESTIMATED), unknown=list(unknown)
    )
    return replace(build_report(config, run, outcome, run_dir), rebuilt=rebuilt)


def _tidy_stack_files(run_dir: Path) -> None:
    """Every rank opens a stack file for the watchdog, and a FIFO to be asked through; only
    the files written to matter."""
    stacks.remove_asks(run_dir)
    for path in run_dir.glob(STACKS_GLOB):
        if path.lstat().st_size == 0:  # (a link someone put there is removed, never followed)
            path.unlink()
