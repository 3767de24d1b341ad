"""The CI gate: run one policy (or, after --, any program, traced; or, with --pid, a process
already running, attached to) and exit 0 when RSS is bounded and every threshold holds.

Exit codes: 0 bounded and within every threshold; 1 a leak or a threshold exceeded (the
message says which and by how much); 2 bad input; 3 the run failed or no verdict could be
reached.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import asdict
from pathlib import Path

import typer

from hicache_cli.analysis.baseline import compare as compare_to_baseline
from hicache_cli.analysis.baseline import parse_tolerance, workload_difference
from hicache_cli.analysis.gate import MARKS, RESULT_WORDS, Thresholds, evaluate, exit_code, gate_document
from hicache_cli.analysis.kinds import Status
from hicache_cli.analysis.report import load_report
from hicache_cli.analysis.results import Report
from hicache_cli.analysis.settle import Settler
from hicache_cli.cli import options, running
from hicache_cli.cli.configure import StressOptions, check_run_options, config_from_options
from hicache_cli.cli.output import append_step_summary, print_json, say, write_html
from hicache_cli.config import DEFAULT_PROBE_HZ, RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.launch.attach_launcher import attach_config
from hicache_cli.launch.trace_launcher import trace_config
from hicache_cli.present.github import check_summary, github_annotations
from hicache_cli.present.junit import junit_xml
from hicache_cli.present.progress import make_console, summary_table
from hicache_cli.rundir import create_run_dir, write_atomically
from hicache_cli.units import format_duration, parse_duration, parse_rate_mb_per_h

CHECK_WARMUP = "3s"  # the cache warm-up already ran; a short trend warm-up settles sooner
CHECK_POLICY = "drain"  # the fix: the gate's question is whether it holds
CHECK_DURATION = "30s"


def check(
    ctx: typer.Context,
    policy: str = options.policy(CHECK_POLICY),
    target: str = options.TARGET,
    sglang_class: str = options.SGLANG_CLASS,
    pp: int = options.PP,
    tp: int = options.TP,
    duration: str = options.duration(None, f"Run exactly this long (default {CHECK_DURATION})."),
    max_duration: str = typer.Option(
        None, "--max-duration", help="Stop as soon as the verdict is settled, at the latest after this long."
    ),
    max_rss_slope: str = typer.Option(
        "200MB/h", "--max-rss-slope", help="Fail when RSS grows faster (e.g. 200MB/h, 1GB/h, 50KB/s)."
    ),
    max_depth: int = typer.Option(None, "--max-depth", help="Fail when a work list ever holds more Works."),
    max_p99_ms: float = typer.Option(None, "--max-p99-ms", help="Fail when a rank's loop p99 exceeds this."),
    baseline: Path = typer.Option(
        None,
        "--baseline",
        help="Also fail when this run is worse than this report (or run directory) of the same workload: "
        "RSS slope, peak depth, loop p99. See docs/ci.md.",
    ),
    tolerance: list[str] = typer.Option(
        [],
        "--tolerance",
        help="With --baseline, how much worse is still noise (repeatable): slope=RATE beyond the baseline's "
        "interval, depth=FACTOR, p99=FACTOR. Default: slope=50MB/h, depth=1.5x, p99=3x.",
    ),
    junit: Path = typer.Option(None, "--junit", help="Write JUnit XML here (one test case per assertion per rank)."),
    report: Path = options.REPORT,
    html: Path = options.HTML,
    workload: str = options.WORKLOAD,
    seed: int = options.SEED,
    wait_timeout: str = options.WAIT_TIMEOUT,
    warmup: str = typer.Option(
        None,
        "--warmup",
        help=f"Start of the run left out of trends (default {CHECK_WARMUP}; a traced program's: auto).",
    ),
    fault: list[str] = options.FAULT,
    stall_timeout: str = options.STALL_TIMEOUT,
    device: str = options.DEVICE,
    pp_backend: str = options.PP_BACKEND,
    run_dir: Path = options.run_dir("<policy>"),
    port: int = options.PORT,
    no_live: bool = options.NO_LIVE,
    json_output: bool = options.json_document("the gate's result, its assertions and the report as one JSON document"),
    loop: str = options.LOOP,
    pid: list[int] = options.PID,
    command: list[str] = options.COMMAND,
) -> None:
    """The CI gate: exit 0 when RSS stays bounded and within every threshold, 1 when not."""
    if pid and command:
        raise UsageError("give --pid (a process already running) or -- COMMAND (a program to start), not both")
    if pid and loop is not None:
        raise UsageError("--loop names a function of a traced program; an attached process takes none")
    if command or pid:
        if (option := options.given_any(ctx, options.MODEL_OPTIONS)) is not None:
            what = "-- COMMAND the program" if command else "--pid the process"
            raise UsageError(f"{option} shapes hicache's own workload; with {what} is the workload")
    elif loop is not None:
        raise UsageError("--loop names a function of a traced program: give the program after --")
    elif warmup is None:
        warmup = _default_warmup(*(("max-duration", max_duration) if max_duration else ("duration", duration)))
    if duration is not None and max_duration is not None:
        raise UsageError("give --duration or --max-duration, not both")
    if max_duration is not None:
        longest = parse_duration(max_duration, "max-duration")
        if warmup is not None and parse_duration(warmup, "warmup") >= longest:
            raise UsageError(f"--warmup ({warmup}) must be shorter than --max-duration ({max_duration})")
    limits = Thresholds(
        max_rss_slope_mb_per_h=parse_rate_mb_per_h(max_rss_slope, "max-rss-slope"),
        max_depth=max_depth,
        max_p99_ms=max_p99_ms,
        rss_slope_given=options.given(ctx, "max_rss_slope"),
    )
    if max_depth is not None and max_depth < 0:
        raise UsageError(f"--max-depth must be 0 or more, got {max_depth}")
    if max_p99_ms is not None and not (math.isfinite(max_p99_ms) and max_p99_ms > 0):
        raise UsageError(f"--max-p99-ms must be more than zero, got {max_p99_ms}")
    if tolerance and baseline is None:
        raise UsageError("--tolerance applies to --baseline: give the report to compare with")
    allowed = parse_tolerance(tolerance)
    check_run_options(4.0, report, port, html=html, junit=junit)
    if pid:
        config = attach_config(
            pid, max_duration or duration or CHECK_DURATION, DEFAULT_PROBE_HZ, warmup, limits.max_rss_slope_mb_per_h
        )
    elif command:
        config = trace_config(
            command,
            loop,
            max_duration or duration,
            DEFAULT_PROBE_HZ,
            warmup,
            limits.max_rss_slope_mb_per_h,
            # as `trace` has it: a traced program's step may be slow, and a process that stood
            # still this long at its end is stuck (analysis/progress.py)
            stall_timeout if options.given(ctx, "stall_timeout") else options.TRACE_STALL_TIMEOUT_DEFAULT,
        )
    else:
        config = config_from_options(
            StressOptions.given(
                ctx,
                policy=policy if policy is not None or options.given(ctx, "target") else CHECK_POLICY,
                duration=max_duration or duration or CHECK_DURATION,
                warmup=warmup,  # CHECK_WARMUP when not given
                leak_threshold=limits.max_rss_slope_mb_per_h,
            ),
            say,
        )
    base = _load_baseline(baseline, config) if baseline is not None else None
    directory = create_run_dir(run_dir, config.label)
    settler = Settler(config) if max_duration else None
    if pid:
        result, console = running.run_attached(
            config, directory, no_live, 4.0, report, early_stop=settler, json_output=json_output
        )
        what = f"attach to pid {', '.join(map(str, pid))}"
    elif command:
        result, console = running.run_traced(
            config, directory, no_live, 4.0, report, early_stop=settler, json_output=json_output
        )
        what = f"trace of {' '.join(command)}"
    else:
        live = running.wants_live(no_live, json_output)
        console = make_console(live, json_output)
        mode = f"until settled, at most {max_duration}" if max_duration else format_duration(config.duration_s)
        what = config.title(", ", duration=False)
        console.print(f"hicache check: {what}, {mode}; run directory {directory}")
        result = running.run_with_progress(
            config, directory, console, live, port=port, report_copy=report, early_stop=settler
        )
    rep = result.report
    results = evaluate(rep, limits)
    if base is not None:
        results += compare_to_baseline(rep, base, str(baseline), allowed)
    code = exit_code(results)
    if json_output:
        compared = None if base is None else {"report": str(baseline), "tolerance": asdict(allowed)}
        print_json(gate_document(rep, results, limits, compared))
    write_html(rep, html, console)  # an interrupted run's page too: what was measured
    running.exit_if_interrupted(rep)
    console.print(summary_table(rep, console.width))
    for a in results:
        console.print(f"{MARKS[a.passed]:>9}  {a.name:<14} {a.message}")
    took = f"{rep.run_s or 0:.1f} s of workload, {rep.wall_s or 0:.1f} s in all"
    if rep.stopped_early:
        took = f"{rep.stopped_early}; {took}"
    verdict = RESULT_WORDS[code]
    console.print(f"hicache check {verdict} ({what}): {took}")
    console.print(f"report: {result.report_path}")
    if junit is not None:
        write_atomically(junit, junit_xml(results, rep, rep.wall_s or 0.0))
        console.print(f"junit: {junit}")
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in github_annotations(results, config.label):
            print(line, file=sys.stderr if json_output else sys.stdout)  # the runner reads both
    append_step_summary(check_summary(rep, results, verdict, what, str(result.report_path)))
    raise typer.Exit(code)


def _default_warmup(option: str, duration: str | None) -> str | None:
    """CHECK_WARMUP, unless the run is no longer than that: then each rank's own (where its
    RSS settles), as on stress. A warm-up the user never gave must not refuse their duration."""
    if duration is not None and parse_duration(duration, option) <= parse_duration(CHECK_WARMUP, "warmup"):
        return None
    return CHECK_WARMUP


def _load_baseline(path: Path, config: RunConfig) -> Report:
    """The report to compare with: a completed run of the same workload, or one line why not."""
    base = load_report(path)
    if base.status != Status.COMPLETED:
        raise UsageError(f"--baseline {path}: that run {base.status}; a baseline must be a completed run")
    if (difference := workload_difference(base.config, config)) is not None:
        raise UsageError(
            f"--baseline {path}: another workload ({difference}); only the policy and the code under test may differ"
        )
    return base
