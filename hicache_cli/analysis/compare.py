"""Policies side by side: one summary row per policy's report, the best of each column,
the JSON bundle. Pure: reports in, rows and the bundle out (present/tables.py renders them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from hicache_cli.analysis.kinds import FailureKind, Status, Verdict
from hicache_cli.analysis.results import Report

BUNDLE_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class PolicyRow:
    policy: str
    status: str
    verdict: str
    slope_mb_per_h: float | None  # the steepest rank's RSS trend
    slope_ci95: tuple[float, float] | None
    peak_depth: int | None  # over all ranks
    final_depth: int | None  # over all ranks
    p50_ms: float | None  # PP0's loop: the one a blocking drain slows down
    p99_ms: float | None
    max_ms: float | None
    rounds_per_s: float | None  # PP0's
    messages_sent: int  # all ranks
    stalls: int  # watchdog findings
    failures: int
    note: str | None = None  # why a policy was not run (not applicable on this backend)


NOT_APPLICABLE = "not applicable"


def not_applicable_row(policy: str, backend: str, reason: str) -> PolicyRow:
    """A policy that cannot work on `backend` by design: a row that says so, never run."""
    return PolicyRow(
        policy=policy,
        status=NOT_APPLICABLE,
        verdict=f"{NOT_APPLICABLE} on {backend}",
        slope_mb_per_h=None,
        slope_ci95=None,
        peak_depth=None,
        final_depth=None,
        p50_ms=None,
        p99_ms=None,
        max_ms=None,
        rounds_per_s=None,
        messages_sent=0,
        stalls=0,
        failures=0,
        note=f"{policy}: {NOT_APPLICABLE} on {backend}: {reason}",
    )


def summarize(report: Report) -> PolicyRow:
    ranks = report.measured_ranks
    sloped = [r for r in ranks if r.rss is not None and r.rss.slope_mb_per_h is not None]
    steepest = max(sloped, key=lambda r: r.rss.slope_mb_per_h, default=None)  # type: ignore[union-attr]
    pp0 = next((r for r in ranks if r.pp_rank == 0), None)
    lat = pp0.loop_latency if pp0 else None
    slope = steepest.rss if steepest else None
    return PolicyRow(
        policy=report.config.label,
        status=report.status,
        verdict=report.verdict,
        slope_mb_per_h=slope.slope_mb_per_h if slope else None,
        slope_ci95=tuple(slope.slope_ci95_mb_per_h) if slope and slope.slope_ci95_mb_per_h else None,
        peak_depth=max((r.work_list.max for r in ranks if r.work_list), default=None),
        final_depth=max((r.work_list.final for r in ranks if r.work_list), default=None),
        p50_ms=lat.p50 if lat else None,
        p99_ms=lat.p99 if lat else None,
        max_ms=lat.max if lat else None,
        rounds_per_s=pp0.rounds_per_s if pp0 else None,
        messages_sent=sum(r.messages.sent for r in ranks if r.messages),
        stalls=sum(isinstance(f.kind, FailureKind) and f.kind.stuck for f in report.failures),
        failures=len(report.failures),
    )


# column -> (attribute, lower is better)
BEST = {
    "slope": ("slope_mb_per_h", True),
    "peak": ("peak_depth", True),
    "final": ("final_depth", True),
    "p50": ("p50_ms", True),
    "p99": ("p99_ms", True),
    "max": ("max_ms", True),
    "rps": ("rounds_per_s", False),
    "sent": ("messages_sent", True),
    "stalls": ("stalls", True),
}


def best_of(rows: list[PolicyRow]) -> dict[str, str]:
    """Column -> the policy with the best value in it (ties: the first). Only policies that
    completed BOUNDED compete, when there are any: a leaking policy's speed is no prize."""
    completed = [r for r in rows if r.status == Status.COMPLETED]
    contenders = [r for r in completed if r.verdict == Verdict.BOUNDED] or completed
    best = {}
    for column, (attr, lower) in BEST.items():
        candidates = [r for r in contenders if getattr(r, attr) is not None]
        if candidates:
            pick = min if lower else max
            best[column] = pick(candidates, key=lambda r: getattr(r, attr)).policy
    return best


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def cells(row: PolicyRow) -> dict[str, str]:
    if row.status == NOT_APPLICABLE:
        return {key: row.policy if key == "policy" else row.verdict if key == "verdict" else "-" for key in HEADERS}
    ci = row.slope_ci95
    slope = "-" if row.slope_mb_per_h is None else f"{row.slope_mb_per_h:+.0f} [{ci[0]:+.0f},{ci[1]:+.0f}]"
    return {
        "policy": row.policy,
        "verdict": row.verdict if row.status == Status.COMPLETED else f"{row.verdict} ({row.status})",
        "slope": slope,
        "peak": _num(row.peak_depth, "d"),
        "final": _num(row.final_depth, "d"),
        "p50": _num(row.p50_ms, ".3f"),
        "p99": _num(row.p99_ms, ".2f"),
        "max": _num(row.max_ms, ".1f"),
        "rps": _num(row.rounds_per_s, ".0f"),
        "sent": str(row.messages_sent),
        "stalls": str(row.stalls),
    }


HEADERS = {
    "policy": "policy",
    "verdict": "verdict",
    "slope": "RSS MB/h [95%]",
    "peak": "peak depth",
    "final": "final depth",
    "p50": "p50 ms",
    "p99": "p99 ms",
    "max": "max ms",
    "rps": "rounds/s",
    "sent": "sent",
    "stalls": "stalls",
}


def bundle(reports: list[Report], common: dict[str, Any], rows: list[PolicyRow] | None = None) -> dict[str, Any]:
    """The JSON bundle: the shared settings and, per policy, its verdict, summary and full
    report. `rows`, when given, are every policy's in order, those not run included (their
    report is null, their `note` says why); otherwise one per report."""
    rows = rows if rows is not None else [summarize(r) for r in reports]
    by_policy = {r.config.label: r.to_dict() for r in reports}
    return {
        "schema_version": BUNDLE_SCHEMA_VERSION,
        "kind": "compare-policies",
        "config": common,
        "best": best_of(rows),
        "policies": [
            {
                "policy": row.policy,
                "verdict": row.verdict,
                "status": row.status,
                "note": row.note,
                "summary": asdict(row),
                "report": by_policy.get(row.policy),
            }
            for row in rows
        ],
    }
