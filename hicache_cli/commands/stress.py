"""Run a real multi-rank HiCache PP-sync workload under one drain policy and report on it."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import typer

from cache.faults import FaultSpecError, parse_fault
from cache.policies import POLICIES
from cache.workload import PRESETS
from hicache_cli.config import StressConfig
from hicache_cli.dashboard import Dashboard
from hicache_cli.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED, UsageError
from hicache_cli.launcher import LOOPBACK, pick_port
from hicache_cli.progress import LiveView, PlainProgress, make_console, summary_table, verdict_lines
from hicache_cli.run import execute
from hicache_cli.rundir import create_run_dir
from hicache_cli.units import parse_duration

MAX_WORLD_SIZE = 64


@dataclass(frozen=True)
class StressOptions:
    pp: int
    tp: int
    policy: str
    duration: str
    workload: str
    seed: int
    probe_hz: float
    wait_timeout: str
    request_rate: float | None = None
    prefix_sharing: float | None = None
    idle_fraction: float | None = None
    warmup: str | None = None
    leak_threshold: float = 100.0
    stall_timeout: str = "5s"
    faults: tuple[str, ...] = ()


def config_from_options(opts: StressOptions) -> StressConfig:
    """Check every option and build the run's config; bad input raises UsageError."""
    for name, value in (("pp", opts.pp), ("tp", opts.tp)):
        if value < 1:
            raise UsageError(f"--{name} must be at least 1, got {value}")
    if opts.pp * opts.tp > MAX_WORLD_SIZE:
        raise UsageError(f"--pp x --tp = {opts.pp * opts.tp} ranks; at most {MAX_WORLD_SIZE} are supported")
    if opts.policy not in POLICIES:
        raise UsageError(f"--policy: unknown policy {opts.policy!r}; choose one of: {', '.join(POLICIES)}")
    if opts.workload not in PRESETS:
        raise UsageError(f"--workload: unknown workload {opts.workload!r}; choose one of: {', '.join(PRESETS)}")
    for name, value in (
        ("request-rate", opts.request_rate),
        ("prefix-sharing", opts.prefix_sharing),
        ("idle-fraction", opts.idle_fraction),
    ):
        if value is not None and not 0.0 <= value <= 1.0:
            raise UsageError(f"--{name} must be between 0 and 1, got {value}")
    if not 0.1 <= opts.probe_hz <= 100:
        raise UsageError(f"--probe-hz must be between 0.1 and 100, got {opts.probe_hz}")
    if not (math.isfinite(opts.leak_threshold) and opts.leak_threshold > 0):
        raise UsageError(f"--leak-threshold must be more than zero, got {opts.leak_threshold}")
    duration = parse_duration(opts.duration, "duration")
    for spec in opts.faults:
        try:
            parse_fault(spec, opts.pp * opts.tp)
        except FaultSpecError as exc:
            raise UsageError(f"--fault: {exc}") from None
    warmup = parse_duration(opts.warmup, "warmup") if opts.warmup is not None else None
    if warmup is not None and warmup >= duration:
        raise UsageError(f"--warmup ({warmup:g}s) must be shorter than --duration ({duration:g}s)")
    return StressConfig(
        pp=opts.pp,
        tp=opts.tp,
        policy=opts.policy,
        duration_s=duration,
        workload=opts.workload,
        request_rate=opts.request_rate,
        prefix_sharing=opts.prefix_sharing,
        idle_fraction=opts.idle_fraction,
        seed=opts.seed,
        probe_hz=opts.probe_hz,
        wait_timeout_s=parse_duration(opts.wait_timeout, "wait-timeout"),
        warmup_s=warmup,
        leak_threshold_mb_per_h=opts.leak_threshold,
        stall_timeout_s=parse_duration(opts.stall_timeout, "stall-timeout"),
        faults=tuple(opts.faults),
    )


POLICY_HELP = "Drain policy: " + ", ".join(POLICIES) + ". See docs/policies.md."


def stress(
    pp: int = typer.Option(2, "--pp", help="Pipeline-parallel stages (ranks per pipeline)."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel ranks per stage; world size is pp x tp."),
    policy: str = typer.Option("reap", "--policy", "-p", help=POLICY_HELP),
    duration: str = typer.Option("15s", "--duration", "-d", help="Workload time per rank: 15s, 2m, or seconds."),
    workload: str = typer.Option(
        "mixed", "--workload", help="Preset: " + ", ".join(PRESETS) + " (idle = the incident's idle server)."
    ),
    request_rate: float = typer.Option(None, "--request-rate", help="Chance a busy round admits a request (0-1)."),
    prefix_sharing: float = typer.Option(
        None, "--prefix-sharing", help="Share of requests with a shared prefix (0-1)."
    ),
    idle_fraction: float = typer.Option(None, "--idle-fraction", help="Share of rounds with nothing to do (0-1)."),
    seed: int = typer.Option(0, "--seed", help="Workload seed; every rank uses the same."),
    probe_hz: float = typer.Option(10.0, "--probe-hz", help="Samples per second per rank."),
    wait_timeout: str = typer.Option("5s", "--wait-timeout", help="bounded-drain: longest a round's drain may wait."),
    warmup: str = typer.Option(
        None, "--warmup", help="Start of the run left out of trends (default: a fifth, 1-10 s)."
    ),
    leak_threshold: float = typer.Option(
        100.0, "--leak-threshold", help="RSS slope in MB/h above which RSS counts as growing."
    ),
    fault: list[str] = typer.Option(
        [],
        "--fault",
        help="Inject a fault (repeatable): lag:RANK:MS, stall:RANK:AT:FOR, hang:RANK:AT, "
        "kill:RANK:AT, raise-in-wait:RANK:AT. See docs/faults.md.",
    ),
    stall_timeout: str = typer.Option(
        "5s", "--stall-timeout", help="A rank whose round runs longer is stalled: stacks dumped, run ended."
    ),
    run_dir: Path = typer.Option(None, "--run-dir", help="Run directory (default ./hicache-runs/<time>-<policy>/)."),
    report: Path = typer.Option(None, "--report", help="Also write the JSON report here."),
    port: int = typer.Option(None, "--port", help="Rendezvous port on 127.0.0.1 (default: a free one)."),
    no_live: bool = typer.Option(False, "--no-live", help="Plain progress lines instead of the live dashboard."),
    refresh: float = typer.Option(4.0, "--refresh", help="Live dashboard refreshes per second."),
) -> None:
    """Run a real multi-rank HiCache PP-sync workload under one drain policy and report on it."""
    config = config_from_options(
        StressOptions(
            pp=pp,
            tp=tp,
            policy=policy,
            duration=duration,
            workload=workload,
            seed=seed,
            probe_hz=probe_hz,
            wait_timeout=wait_timeout,
            request_rate=request_rate,
            prefix_sharing=prefix_sharing,
            idle_fraction=idle_fraction,
            warmup=warmup,
            leak_threshold=leak_threshold,
            stall_timeout=stall_timeout,
            faults=tuple(fault),
        )
    )
    if not 0.2 <= refresh <= 20:
        raise UsageError(f"--refresh must be between 0.2 and 20 per second, got {refresh}")
    if report is not None and not report.parent.exists():
        raise UsageError(f"--report: directory {report.parent} does not exist")
    if port is not None:
        pick_port(LOOPBACK, port)  # a bad or busy port fails before anything is created
    directory = create_run_dir(run_dir, config.policy)
    live = not no_live and sys.stdout.isatty()
    console = make_console(live)
    console.print(
        f"hicache stress: {config.policy}, pp={config.pp} tp={config.tp}, {config.duration_s:g}s -> {directory}"
    )
    if live:
        with LiveView(Dashboard(config, str(directory)), console) as view:
            result = execute(config, directory, view, port, report, refresh_s=1.0 / refresh)
    else:
        result = execute(config, directory, PlainProgress(config.duration_s, write=console.print), port, report)
    console.print(summary_table(result.report, console.width))
    for line in verdict_lines(result.report):
        console.print(line)
    console.print(f"report: {result.report_path}")
    status = result.report["status"]
    if status == "interrupted":
        raise typer.Exit(EXIT_INTERRUPTED)
    if status == "failed":
        raise typer.Exit(EXIT_RUN_FAILED)
