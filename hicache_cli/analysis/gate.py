"""The CI gate's judgement: assertions per rank from a report and thresholds, and the exit code.

Pure: a Report in, results out. `hicache check` prints them and writes JUnit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from hicache_cli.analysis.kinds import CauseKind, Status, Verdict
from hicache_cli.analysis.results import RankReport, Report, Rss
from hicache_cli.analysis.trace_report import nothing_traced
from hicache_cli.errors import EXIT_FINDING, EXIT_OK, EXIT_RUN_FAILED


@dataclass(frozen=True)
class Thresholds:
    max_rss_slope_mb_per_h: float = 200.0
    max_depth: int | None = None
    max_p99_ms: float | None = None
    # the RSS limit was asked for (`check --max-rss-slope`): only then is a traced program's
    # memory gated, when it grows for a reason other than Works (issue 25, analysis/causes.py)
    rss_slope_given: bool = True


@dataclass(frozen=True)
class Assertion:
    rank: int | None  # None: about the run as a whole
    name: str
    passed: bool | None  # None: could not be decided
    message: str


def evaluate(report: Report, limits: Thresholds) -> list[Assertion]:
    results = []
    if report.status != Status.COMPLETED:
        causes = "; ".join(f.line() for f in report.failures[:3])
        results.append(Assertion(None, "run", None, f"the run {report.status}" + (f": {causes}" if causes else "")))
    if report.traced:
        results += _program(report)
    for r in report.ranks:
        rank = r.rank
        results.append(_bounded(r, report.traced, limits))
        if not r.measured:
            continue
        if r.stuck is not None:  # a program stuck at the end proves nothing either way (analysis/progress.py)
            results.append(Assertion(rank, "progress", None, f"rank {rank} {r.stuck.text}"))
        if not report.traced or limits.rss_slope_given:  # a traced program's memory: gated when asked
            results.append(_slope(rank, r.rss, limits.max_rss_slope_mb_per_h))
        if limits.max_depth is not None and r.work_list is not None:
            peak = r.work_list.max
            over = peak - limits.max_depth
            held = "live Works reached" if report.traced else "work list reached"
            text = f"{held} {peak}" + (f", {over} over the limit {limits.max_depth}" if over > 0 else "")
            results.append(Assertion(rank, "max-depth", over <= 0, f"rank {rank} {text}"))
        if limits.max_p99_ms is not None:
            results.append(_p99(r, limits.max_p99_ms))
    return results


def _p99(r: RankReport, limit: float) -> Assertion:
    p99 = r.loop_latency.p99 if r.loop_latency is not None else None
    if p99 is None:
        return Assertion(r.rank, "max-p99", None, f"rank {r.rank} finished no round after warm-up")
    over = p99 - limit
    text = f"loop p99 {p99:.2f} ms" + (f", {over:.2f} ms over the limit {limit:g}" if over > 0 else "")
    return Assertion(r.rank, "max-p99", over <= 0, f"rank {r.rank} {text}")


def _bounded(r: RankReport, traced: bool, limits: Thresholds) -> Assertion:
    """The verdict. A traced rank whose memory grows for a reason other than Works or
    messages is no Work leak: it fails only when a memory limit was asked for."""
    text = f"rank {r.rank} {r.verdict}: {r.verdict_reason}"
    if traced and r.cause is not None and r.cause.kind == CauseKind.MEMORY:
        if limits.rss_slope_given:
            return Assertion(
                r.rank, "bounded", False, f"{text} (--max-rss-slope {limits.max_rss_slope_mb_per_h:g} MB/h)"
            )
        return Assertion(r.rank, "bounded", True, f"{text} (no Work leak; --max-rss-slope gates memory)")
    decided = r.verdict.decided if isinstance(r.verdict, Verdict) else None
    return Assertion(r.rank, "bounded", decided, text)


def _program(report: Report) -> list[Assertion]:
    """A traced program must have been watched, and must have ended well, for a pass to mean anything."""
    if not report.measured_ranks:
        command = report.target.command() if report.target is not None else []
        return [Assertion(None, "traced", None, nothing_traced(command))]
    code = report.program_exit_code
    if code not in (0, None) and not report.program_stopped:  # its own end, not hicache's stop
        return [Assertion(None, "program", None, f"the program exited with code {code}")]
    return []


def _slope(rank: int, rss: Rss | None, limit: float) -> Assertion:
    if rss is None or rss.slope_ci95_mb_per_h is None or rss.slope_mb_per_h is None:
        return Assertion(rank, "rss-slope", None, f"rank {rank}: too little data for an RSS trend")
    slope, (lo, hi) = rss.slope_mb_per_h, rss.slope_ci95_mb_per_h
    text = f"rank {rank} RSS slope {rss.interval_text()}"
    if lo > limit:
        return Assertion(rank, "rss-slope", False, f"{text} exceeds {limit:g} MB/h by {slope - limit:.0f} MB/h")
    if hi <= limit:
        return Assertion(rank, "rss-slope", True, f"{text} is within {limit:g} MB/h")
    return Assertion(rank, "rss-slope", None, f"{text} straddles {limit:g} MB/h")


def exit_code(results: list[Assertion]) -> int:
    """1 when anything failed; else 3 when something (the run itself, a verdict) could not be
    decided; else 0."""
    if any(a.passed is False for a in results):
        return EXIT_FINDING
    if any(a.passed is None for a in results):
        return EXIT_RUN_FAILED
    return EXIT_OK


CHECK_SCHEMA_VERSION = 1
RESULT_WORDS = {EXIT_OK: "PASS", EXIT_FINDING: "FAIL", EXIT_RUN_FAILED: "UNDECIDED"}
MARKS = {True: "PASS", False: "FAIL", None: "UNDECIDED"}  # an assertion's, by `passed`


def gate_document(
    report: Report, results: list[Assertion], limits: Thresholds, baseline: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What `check --json` prints: the gate's result, each assertion, the thresholds, the
    baseline compared with (`{report, tolerance}`, or None), and the run's full report."""
    return {
        "schema_version": CHECK_SCHEMA_VERSION,
        "kind": "check",
        "result": RESULT_WORDS[exit_code(results)],
        "thresholds": asdict(limits),
        "baseline": baseline,
        "assertions": [asdict(a) for a in results],
        "report": report.to_dict(),
    }
