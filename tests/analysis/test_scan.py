"""analysis/scan.py: version ranges, one row per release's report, the table, Markdown and bundle."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from rich.console import Console

from hicache_cli.analysis.report import build_report
from hicache_cli.analysis.results import (
    LoopLatency,
    Messages,
    RankReport,
    Report,
    Rss,
    SGLangSection,
    Status,
    Verdict,
    WorkList,
)
from hicache_cli.analysis.scan import (
    HEADERS,
    NOT_APPLICABLE,
    SCAN_SCHEMA_VERSION,
    ScanRow,
    cells,
    first_change,
    not_applicable,
    row_from_report,
    scan_bundle,
)
from hicache_cli.config import RunConfig, StressConfig
from hicache_cli.errors import UsageError
from hicache_cli.outcome import RunOutcome
from hicache_cli.present.tables import release_table, to_markdown, to_rich
from hicache_cli.sglang_target.locate import pick_versions
from hicache_cli.targets import SGLangTarget
from tests.conftest import build_pp2_run

AVAILABLE = ["0.5.9", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.14", "0.5.15", "0.5.16", "0.5.20", "0.5.23"]

# --- pick_versions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("0.5.12..0.5.15", ["0.5.12", "0.5.12.post1", "0.5.13", "0.5.14", "0.5.15"]),
        ("0.5.20..", ["0.5.20", "0.5.23"]),
        ("..0.5.13", ["0.5.9", "0.5.12", "0.5.12.post1", "0.5.13"]),
        ("..", AVAILABLE),
        ("0.5.14..0.5.14", ["0.5.14"]),
        ("0.5.15,0.5.13,0.5.15", ["0.5.13", "0.5.15"]),
        (" 0.5.9 , 0.5.12.post1 ,0.5.12", ["0.5.9", "0.5.12", "0.5.12.post1"]),
        ("0.5.23", ["0.5.23"]),
    ],
)
def test_pick_versions(spec: str, expected: list[str]) -> None:
    assert pick_versions(spec, AVAILABLE) == expected


def test_pick_versions_sorts_whatever_order_pip_gave() -> None:
    assert pick_versions("0.5.12..0.5.13", list(reversed(AVAILABLE))) == ["0.5.12", "0.5.12.post1", "0.5.13"]


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("0.5.11..0.5.15", "0.5.11"),
        ("0.5.12..0.5.99", "0.5.99"),
        ("0.5.10..", "0.5.10"),
        ("0.5.12,0.5.17", "0.5.17"),
        ("latest", "latest"),
    ],
)
def test_unknown_versions_are_refused(spec: str, named: str) -> None:
    with pytest.raises(UsageError) as caught:
        pick_versions(spec, AVAILABLE)
    message = str(caught.value)
    assert message.startswith("--versions")
    assert named in message
    assert "\n" not in message


@pytest.mark.parametrize("spec", ["0.5.15..0.5.12", "", ",", " , "])
def test_empty_selections_are_refused(spec: str) -> None:
    with pytest.raises(UsageError, match="--versions"):
        pick_versions(spec, AVAILABLE)


def test_an_empty_range_says_so() -> None:
    with pytest.raises(UsageError, match="no release in that range"):
        pick_versions("0.5.15..0.5.12", AVAILABLE)


# --- rows ---------------------------------------------------------------------------------------

ENTRY = {
    "version": "9.9.9",
    "origin": "wheel",
    "location": "sglang==9.9.9 (cached in /c)",
    "class": "HiRadixCache",
    "file": "/c/sglang/srt/mem_cache/hiradix_cache.py",
    "sha256": "ab" * 32,
    "tags_file": "",
    "drain_method": "_reap_completed_async_work",
}


def sglang_report(*, leaking: bool = True, final: bool = True, drain_method: str | None = None) -> Report:
    """A pp=2 run of SGLang 9.9.9's code, from tests/conftest.py's synthetic samples (one send a round)."""
    entry = {**ENTRY, "drain_method": drain_method if drain_method is not None else ENTRY["drain_method"]}
    config = RunConfig(target=SGLangTarget.from_dict({"pp": 2, **entry}), duration_s=60.0)
    return build_report(config, build_pp2_run(leaking=leaking, final=final), RunOutcome(wall_s=61.0))


def test_row_from_a_leaking_report() -> None:
    row = row_from_report("9.9.9", sglang_report(leaking=True))
    assert row == ScanRow(
        version="9.9.9",
        verdict="LEAK",
        class_name="HiRadixCache",
        drain_method="_reap_completed_async_work",
        sends_per_round=1.0,
        depth_final=60000,
        slope_mb_per_h=pytest.approx(180.0),
        status="completed",
        note=None,
    )


def test_row_from_a_bounded_report() -> None:
    row = row_from_report("9.9.10", sglang_report(leaking=False, drain_method="_drain_async_work"))
    assert (row.version, row.verdict, row.drain_method, row.depth_final) == (
        "9.9.10",
        "BOUNDED",
        "_drain_async_work",
        0,
    )


def test_row_from_a_failed_report_carries_the_first_failure() -> None:
    report = sglang_report(final=False)
    assert report.status == "failed"
    row = row_from_report("9.9.9", report)
    assert row.verdict == "failed"
    assert row.status == "failed"
    assert row.note == report.failures[0].message


def test_row_from_a_report_without_a_drain_method() -> None:
    assert row_from_report("9.9.9", sglang_report(drain_method="")).drain_method is None


def test_row_from_a_model_report() -> None:
    report = build_report(StressConfig(pp=2, duration_s=60.0), build_pp2_run(leaking=True), RunOutcome())
    row = row_from_report("model", report)
    assert (row.class_name, row.drain_method, row.sends_per_round) == (None, None, None)
    assert row.verdict == "LEAK"


def test_row_from_a_hand_made_report() -> None:
    """Only what row_from_report and compare.summarize read."""
    rank = RankReport(
        samples=10,
        pp_rank=0,
        rss=Rss(slope_mb_per_h=12.5, slope_ci95_mb_per_h=[10.0, 15.0]),
        work_list=WorkList(max=4, final=2),
        loop_latency=LoopLatency(p50=0.1, p99=0.2, max=0.3),
        rounds_per_s=100.0,
        messages=Messages(sent=50),
    )
    report = Report(
        status=Status.COMPLETED,
        verdict=Verdict.BOUNDED,
        config=StressConfig(policy="sglang-0.5.15"),
        ranks=[rank],
        target=SGLangSection(class_name="HiRadixCache", drain_method="_drain_async_work", sends_per_round=2.0),
    )
    row = row_from_report("0.5.15", report)
    assert row == ScanRow("0.5.15", "BOUNDED", "HiRadixCache", "_drain_async_work", 2.0, 2, 12.5, "completed", None)


def test_not_applicable_row() -> None:
    row = not_applicable("0.5.12", "HiRadixCache has no _pp_sync")
    assert row == ScanRow(version="0.5.12", verdict=NOT_APPLICABLE, note="HiRadixCache has no _pp_sync")
    assert cells(row) == ("0.5.12", "-", "-", "-", "-", "-", "not applicable")


def test_cells_format_numbers() -> None:
    row = ScanRow("0.5.14", "LEAK", "HiRadixCache", "_reap_completed_async_work", 2.0, 12345, 181.6, "completed")
    assert cells(row) == ("0.5.14", "HiRadixCache", "_reap_completed_async_work", "2", "12345", "+182", "LEAK")
    assert cells(ScanRow("x", "BOUNDED", sends_per_round=0.5, slope_mb_per_h=-3.2))[3:6] == ("0.5", "-", "-3")


# --- first_change ------------------------------------------------------------------------------


def row(version: str, verdict: str) -> ScanRow:
    return ScanRow(version=version, verdict=verdict)


def test_first_change_finds_the_fix() -> None:
    rows = [
        not_applicable("0.5.12", "no _pp_sync"),
        row("0.5.13", "LEAK"),
        row("0.5.14", "LEAK"),
        row("0.5.15", "BOUNDED"),
        row("0.5.16", "BOUNDED"),
    ]
    assert first_change(rows) == "LEAK in 0.5.14 -> BOUNDED in 0.5.15"


def test_first_change_skips_releases_that_did_not_run() -> None:
    rows = [row("0.5.14", "LEAK"), row("0.5.15", "failed"), row("0.5.16", "INCONCLUSIVE"), row("0.5.17", "BOUNDED")]
    assert first_change(rows) == "LEAK in 0.5.14 -> BOUNDED in 0.5.17"


def test_first_change_lists_every_change() -> None:
    rows = [row("1", "LEAK"), row("2", "BOUNDED"), row("3", "LEAK")]
    assert first_change(rows) == "LEAK in 1 -> BOUNDED in 2; BOUNDED in 2 -> LEAK in 3"


@pytest.mark.parametrize(
    "rows",
    [[], [row("1", "LEAK")], [row("1", "LEAK"), row("2", "LEAK")], [not_applicable("1", "x"), row("2", "BOUNDED")]],
)
def test_no_change(rows: list[ScanRow]) -> None:
    assert first_change(rows) is None


# --- rendering ---------------------------------------------------------------------------------


def scan_table(rows: list[ScanRow]) -> Any:
    return to_rich(release_table(rows))


def markdown_table(rows: list[ScanRow], title: str) -> str:
    return to_markdown(release_table(rows), title)


ROWS = [
    not_applicable("0.5.12", "no _pp_sync"),
    ScanRow("0.5.14", "LEAK", "HiRadixCache", "_reap_completed_async_work", 2.0, 60000, 180.0, "completed"),
    ScanRow("0.5.15", "BOUNDED", "HiRadixCache", "_drain_async_work", 2.0, 2, 0.4, "completed"),
]


def test_markdown_table() -> None:
    text = markdown_table(ROWS, "sglang 0.5.12..0.5.15")
    lines = text.splitlines()
    assert text.endswith("\n")
    assert lines[0] == "### sglang 0.5.12..0.5.15"
    assert lines[1] == ""
    assert lines[2] == "| " + " | ".join(HEADERS) + " |"
    assert lines[3] == "|---|---|---|---|---|---|---|"
    assert lines[4] == "| 0.5.12 | - | - | - | - | - | not applicable |"
    assert lines[5] == "| 0.5.14 | HiRadixCache | _reap_completed_async_work | 2 | 60000 | +180 | LEAK |"
    assert lines[6] == "| 0.5.15 | HiRadixCache | _drain_async_work | 2 | 2 | +0 | BOUNDED |"
    assert len(lines) == 7


def render(renderable: Any) -> str:
    console = Console(file=io.StringIO(), width=120, force_terminal=True, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def test_scan_table() -> None:
    text = render(scan_table(ROWS))
    lines = [line.rstrip() for line in text.splitlines()]
    for header in HEADERS:
        assert header in lines[0]
    assert len(lines) == 4
    assert lines[1].startswith("0.5.12") and lines[1].endswith("not applicable")
    assert lines[2].startswith("0.5.14") and "60000" in lines[2] and "+180" in lines[2] and lines[2].endswith("LEAK")
    assert lines[3].startswith("0.5.15") and "_drain_async_work" in lines[3] and lines[3].endswith("BOUNDED")
    assert "\x1b" not in text


def test_scan_table_right_aligns_numbers() -> None:
    rows = [ScanRow("a", "LEAK", depth_final=5), ScanRow("b", "LEAK", depth_final=12345)]
    lines = render(scan_table(rows)).splitlines()
    column = lines[0].index("depth at end") + len("depth at end")
    assert lines[1][:column].endswith("5") and lines[2][:column].endswith("12345")


def test_scan_bundle() -> None:
    report = Report(status=Status.COMPLETED, verdict=Verdict.LEAK)
    bundle = scan_bundle(ROWS, {"versions": "0.5.12..0.5.15", "duration_s": 8.0}, {"0.5.14": report})
    assert set(bundle) == {"schema_version", "kind", "config", "changes", "versions"}
    assert bundle["schema_version"] == SCAN_SCHEMA_VERSION
    assert bundle["kind"] == "sglang-scan"
    assert bundle["config"] == {"versions": "0.5.12..0.5.15", "duration_s": 8.0}
    assert bundle["changes"] == "LEAK in 0.5.14 -> BOUNDED in 0.5.15"
    assert [v["version"] for v in bundle["versions"]] == ["0.5.12", "0.5.14", "0.5.15"]
    assert set(bundle["versions"][0]) == {*ScanRow.__dataclass_fields__, "report"}
    assert bundle["versions"][0]["report"] is None
    assert bundle["versions"][0]["note"] == "no _pp_sync"
    assert bundle["versions"][1]["report"] == report.to_dict()
    assert bundle["versions"][1]["class_name"] == "HiRadixCache"
    json.dumps(bundle)
