"""`check`'s run and its gate: what runs (hicache's ranks, a program traced, processes
attached to), then its assertions (and the baseline's), the exit code, and everything the
gate writes (the table, a line per assertion, JUnit XML, GitHub annotations and step summary,
--json's document, the page)."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict

from rich.console import Console

from hicache_cli.analysis.baseline import compare as compare_to_baseline
from hicache_cli.analysis.gate import MARKS, RESULT_WORDS, evaluate, exit_code, gate_document
from hicache_cli.analysis.settle import Settler
from hicache_cli.cli import running
from hicache_cli.cli.configure import GatePlan
from hicache_cli.cli.options import Gate, Outputs, Progress
from hicache_cli.cli.output import append_step_summary, print_json, write_html
from hicache_cli.execution import RunResult
from hicache_cli.present.github import check_summary, github_annotations
from hicache_cli.present.junit import junit_xml
from hicache_cli.present.progress import make_console, summary_table
from hicache_cli.rundir import create_run_dir, write_atomically
from hicache_cli.units import format_duration


def run(
    plan: GatePlan, outputs: Outputs, progress: Progress, port: int | None, pids: list[int], command: list[str]
) -> tuple[RunResult, Console, str]:
    """What `check` runs: the processes `pids` attached to, `command` traced, or hicache's
    ranks; until settled with --max-duration. Returns the result, the console the gate's
    lines go to, and what ran, in words."""
    config, max_duration = plan.config, plan.max_duration
    directory = create_run_dir(outputs.run_dir, config.label, private=config.target.private_run_dir)
    settler = Settler(config) if max_duration else None
    if pids:
        result, console = running.observe(config, directory, progress, outputs, running.attached, early_stop=settler)
        return result, console, f"attach to pid {', '.join(map(str, pids))}"
    if command:
        result, console = running.observe(config, directory, progress, outputs, running.traced, early_stop=settler)
        return result, console, f"trace of {' '.join(command)}"
    live = running.wants_live(progress.no_live, outputs.json_output)
    console = make_console(live, outputs.json_output)
    mode = f"until settled, at most {max_duration}" if max_duration else format_duration(config.duration_s)
    what = config.title(", ", duration=False)
    console.print(f"hicache check: {what}, {mode}; run directory {directory}")
    result = running.run_with_progress(
        config, directory, console, live, port=port, report_copy=outputs.report, early_stop=settler
    )
    return result, console, what


def judge(result: RunResult, plan: GatePlan, what: str, outputs: Outputs, gate: Gate, console: Console) -> int:
    """The gate's exit code for the run (`what` names what ran), everything it writes written;
    an interrupted run exits 128 + its signal instead (running.exit_if_interrupted)."""
    rep = result.report
    assert rep is not None  # check runs on one machine: the report is written here
    results = evaluate(rep, plan.limits)
    if plan.baseline is not None:
        results += compare_to_baseline(rep, plan.baseline, str(gate.baseline), plan.tolerance)
    code = exit_code(results)
    if outputs.json_output:
        compared = (
            None if plan.baseline is None else {"report": str(gate.baseline), "tolerance": asdict(plan.tolerance)}
        )
        print_json(gate_document(rep, results, plan.limits, compared))
    write_html(rep, outputs.html, console)  # an interrupted run's page too: what was measured
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
    if gate.junit is not None:
        write_atomically(gate.junit, junit_xml(results, rep, rep.wall_s or 0.0))
        console.print(f"junit: {gate.junit}")
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in github_annotations(results, plan.config.label):
            print(line, file=sys.stderr if outputs.json_output else sys.stdout)  # the runner reads both
    append_step_summary(check_summary(rep, results, verdict, what, str(result.report_path)))
    return code
