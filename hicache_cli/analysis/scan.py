"""`hicache sglang-scan`: one row per SGLang release, a bisection of the leak. Pure: rows
from reports, their cells and the JSON bundle (present/tables.py renders them); which
releases a range names is sglang_target.locate's."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any

from hicache_cli.analysis.compare import summarize
from hicache_cli.analysis.kinds import Status, Verdict
from hicache_cli.analysis.results import Report, SGLangSection

SCAN_SCHEMA_VERSION = 1
NOT_APPLICABLE = "not applicable"


@dataclass(frozen=True)
class ScanRow:
    version: str
    verdict: str  # LEAK | BOUNDED | INCONCLUSIVE | not applicable | failed ...
    class_name: str | None = None
    drain_method: str | None = None
    sends_per_round: float | None = None
    depth_final: int | None = None  # the deepest work list at the end of the run
    slope_mb_per_h: float | None = None  # the steepest rank's RSS trend
    status: str | None = None  # the run's status; None when nothing ran
    note: str | None = None  # why it is not applicable, or how it failed


def row_from_report(version: str, report: Report) -> ScanRow:
    target = report.target if isinstance(report.target, SGLangSection) else None
    summary = summarize(report)
    failed = report.status == Status.FAILED
    return ScanRow(
        version=version,
        verdict="failed" if failed else report.verdict,
        class_name=target.class_name if target else None,
        drain_method=(target.drain_method or None) if target else None,
        sends_per_round=target.sends_per_round if target else None,
        depth_final=summary.final_depth,
        slope_mb_per_h=summary.slope_mb_per_h,
        status=report.status,
        note=report.failures[0].message if failed and report.failures else None,
    )


def not_applicable(version: str, why: str) -> ScanRow:
    return ScanRow(version=version, verdict=NOT_APPLICABLE, note=why)


HEADERS = ("version", "class", "drain method", "sends/round", "depth at end", "RSS MB/h", "verdict")


def cells(row: ScanRow) -> tuple[str, ...]:
    return (
        row.version,
        row.class_name or "-",
        row.drain_method or "-",
        "-" if row.sends_per_round is None else f"{row.sends_per_round:g}",
        "-" if row.depth_final is None else str(row.depth_final),
        "-" if row.slope_mb_per_h is None else f"{row.slope_mb_per_h:+.0f}",
        row.verdict,
    )


def first_change(rows: list[ScanRow]) -> str | None:
    """Where the verdict changes between consecutive releases that ran, e.g. the fix."""
    ran = [r for r in rows if r.verdict in (Verdict.LEAK, Verdict.BOUNDED)]
    changes = [
        f"{a.verdict} in {a.version} -> {b.verdict} in {b.version}" for a, b in pairwise(ran) if a.verdict != b.verdict
    ]
    return "; ".join(changes) or None


def scan_bundle(rows: list[ScanRow], config: dict[str, Any], reports: dict[str, Report]) -> dict[str, Any]:
    return {
        "schema_version": SCAN_SCHEMA_VERSION,
        "kind": "sglang-scan",
        "config": config,
        "changes": first_change(rows),
        "versions": [{**asdict(row), "report": _dict(reports.get(row.version))} for row in rows],
    }


def _dict(report: Report | None) -> dict[str, Any] | None:
    return None if report is None else report.to_dict()
