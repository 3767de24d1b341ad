"""Run a real multi-rank HiCache PP-sync workload under one drain policy and report on it."""

from __future__ import annotations

from pathlib import Path

import typer

from hicache_cli.commands import common
from hicache_cli.commands.common import StressOptions, config_from_options
from hicache_cli.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED
from hicache_cli.progress import make_console, summary_table, verdict_lines
from hicache_cli.rundir import create_run_dir


def stress(
    pp: int = common.PP,
    tp: int = common.TP,
    policy: str = typer.Option(None, "--policy", "-p", help=common.POLICY_HELP + " Default: reap."),
    target: str = common.TARGET,
    sglang_class: str = common.SGLANG_CLASS,
    duration: str = typer.Option("15s", "--duration", "-d", help="Workload time per rank: 15s, 2m, or seconds."),
    workload: str = common.WORKLOAD,
    request_rate: float = common.REQUEST_RATE,
    prefix_sharing: float = common.PREFIX_SHARING,
    idle_fraction: float = common.IDLE_FRACTION,
    seed: int = common.SEED,
    probe_hz: float = common.PROBE_HZ,
    wait_timeout: str = common.WAIT_TIMEOUT,
    warmup: str = common.WARMUP,
    leak_threshold: float = typer.Option(
        100.0, "--leak-threshold", help="RSS slope in MB/h above which RSS counts as growing."
    ),
    fault: list[str] = common.FAULT,
    stall_timeout: str = common.STALL_TIMEOUT,
    device: str = common.DEVICE,
    pp_backend: str = common.PP_BACKEND,
    run_dir: Path = typer.Option(None, "--run-dir", help="Run directory (default ./hicache-runs/<time>-<policy>/)."),
    report: Path = typer.Option(None, "--report", help="Also write the JSON report here."),
    port: int = common.PORT,
    no_live: bool = common.NO_LIVE,
    refresh: float = common.REFRESH,
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
            device=device,
            pp_backend=pp_backend,
            target=target,
            sglang_class=sglang_class,
        ),
        common.say,
    )
    common.check_run_options(refresh, report, port)
    directory = create_run_dir(run_dir, config.policy)
    live = common.wants_live(no_live)
    console = make_console(live)
    console.print(f"hicache stress: {config.policy}, pp={config.pp} tp={config.tp}, {config.duration_s:g}s")
    console.print(f"run directory: {directory}")
    result = common.run_with_progress(config, directory, console, live, refresh, port, report)
    console.print(summary_table(result.report, console.width))
    for line in verdict_lines(result.report):
        console.print(line)
    console.print(f"report: {result.report_path}")
    status = result.report["status"]
    if status == "interrupted":
        raise typer.Exit(EXIT_INTERRUPTED)
    if status == "failed":
        raise typer.Exit(EXIT_RUN_FAILED)
