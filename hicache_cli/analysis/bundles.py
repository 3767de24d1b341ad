"""The bundles `compare-policies` and `sglang-scan` write (compare.json, scan.json), read back
as typed values, and the one reader that takes any of a run's documents: a report, a bundle,
or a directory holding one. Pure apart from reading the file; stdlib only."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hicache_cli import files
from hicache_cli.analysis import report as report_file
from hicache_cli.analysis.compare import BUNDLE_SCHEMA_VERSION, PolicyRow, summarize
from hicache_cli.analysis.results import Report
from hicache_cli.analysis.scan import SCAN_SCHEMA_VERSION, ScanRow, row_from_report
from hicache_cli.errors import UsageError
from hicache_cli.protocol import REPORT_FILE
from hicache_cli.records import ShapeError

COMPARE = "compare-policies"
SCAN = "sglang-scan"
# kind -> (file name, schema version, the list's key, an entry's name key)
KINDS = {
    COMPARE: ("compare.json", BUNDLE_SCHEMA_VERSION, "policies", "policy"),
    SCAN: ("scan.json", SCAN_SCHEMA_VERSION, "versions", "version"),
}


@dataclass(frozen=True)
class BundleEntry:
    """One policy (compare-policies) or release (sglang-scan): its run's report, or None
    for one that was not run (`note` says why)."""

    name: str
    verdict: str
    status: str | None = None
    note: str | None = None
    report: Report | None = None


@dataclass(frozen=True)
class Bundle:
    kind: str  # COMPARE or SCAN
    config: dict[str, Any]
    entries: list[BundleEntry]
    best: dict[str, str] = field(default_factory=dict)  # compare: column -> the best policy
    changes: str | None = None  # scan: where the verdict changed between releases
    path: Path | None = None

    @classmethod
    def read(cls, data: dict[str, Any], path: Path | None = None) -> Bundle:
        """A bundle from its JSON; its shape is checked (each report as `load_report` checks
        one) and a problem raises ShapeError naming the field."""
        kind = data.get("kind")
        if kind not in KINDS:
            raise ShapeError(f"kind: {kind!r}, expected one of {', '.join(KINDS)}")
        _, version, key, name_key = KINDS[kind]
        if data.get("schema_version") != version:
            raise ShapeError(f"schema_version: {data.get('schema_version')!r}; this hicache reads {version}")
        items = data.get(key)
        if not isinstance(items, list):
            raise ShapeError(f"{key}: missing or not a list")
        entries = [_entry(item, f"{key}[{i}]", name_key) for i, item in enumerate(items)]
        config = data.get("config")
        best = data.get("best")
        changes = data.get("changes")
        return cls(
            kind=kind,
            config=config if isinstance(config, dict) else {},
            entries=entries,
            best={str(k): str(v) for k, v in best.items()} if isinstance(best, dict) else {},
            changes=changes if isinstance(changes, str) else None,
            path=path,
        )

    def policy_rows(self) -> list[PolicyRow]:
        """compare-policies' table rows, as the command made them (analysis.compare.summarize)."""
        return [
            summarize(e.report)
            if e.report is not None
            else PolicyRow(e.name, e.status or "", e.verdict, *(None,) * 8, 0, 0, 0, e.note)
            for e in self.entries
        ]

    def scan_rows(self) -> list[ScanRow]:
        """sglang-scan's table rows, as the command made them (analysis.scan.row_from_report)."""
        return [
            row_from_report(e.name, e.report)
            if e.report is not None
            else ScanRow(version=e.name, verdict=e.verdict, status=e.status, note=e.note)
            for e in self.entries
        ]


def _entry(item: Any, where: str, name_key: str) -> BundleEntry:
    if not isinstance(item, dict):
        raise ShapeError(f"{where}: not an object")
    for key in (name_key, "verdict"):
        if not isinstance(item.get(key), str):
            raise ShapeError(f"{where}.{key}: missing or not a string")
    for key in ("status", "note"):
        if item.get(key) is not None and not isinstance(item[key], str):
            raise ShapeError(f"{where}.{key}: not a string or null")
    data = item.get("report")
    if data is not None:
        if not isinstance(data, dict):
            raise ShapeError(f"{where}.report: not an object or null")
    return BundleEntry(
        name=item[name_key],
        verdict=item["verdict"],
        status=item.get("status"),
        note=item.get("note"),
        report=Report.from_dict(data, f"{where}.report") if data is not None else None,
    )


def load_document(path: Path) -> Report | Bundle:
    """A report.json, a compare.json or scan.json bundle, or a directory holding one of them
    (a run's, or compare-policies' or sglang-scan's parent directory); anything else is a
    UsageError in one line."""
    if path.is_dir():
        for name in (REPORT_FILE, *(file for file, *_ in KINDS.values())):
            if (path / name).is_file():
                return load_document(path / name)
        raise UsageError(f"{path}: a directory without a {REPORT_FILE}, compare.json or scan.json")
    try:  # through files.read_bytes: a FIFO or a device is refused, never read (it could hang)
        data = json.loads(files.read_bytes(path).decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        data = None  # load_report says what is wrong with it, as for every other reader
    if isinstance(data, dict) and data.get("kind") in KINDS:
        try:
            return Bundle.read(data, path)
        except ShapeError as exc:
            raise UsageError(f"{path}: not a valid hicache {data['kind']} bundle: {exc}") from None
    return report_file.load_report(path)
