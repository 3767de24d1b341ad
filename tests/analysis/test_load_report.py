"""report.load_report: a report read back, and every way a file can fail to be one (UsageError, one line)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.analysis.report import SCHEMA_VERSION, load_report, write_report
from hicache_cli.analysis.results import Report
from hicache_cli.errors import UsageError
from hicache_cli.protocol import REPORT_FILE

MakeReport = Callable[..., Report]


@pytest.fixture
def report(make_pp2_report: MakeReport) -> Report:
    return make_pp2_report()


@pytest.fixture
def report_text(report: Report, tmp_path: Path) -> str:
    """The report as write_report lays it out."""
    return write_report(report, tmp_path).read_text(encoding="utf-8")


def as_json(report: Report) -> dict[str, Any]:
    """What a report reads back as."""
    return json.loads(json.dumps(report.to_dict()))


def refused(path: Path) -> str:
    """load_report's message for `path`, which must be one line naming the path."""
    with pytest.raises(UsageError) as caught:
        load_report(path)
    message = str(caught.value)
    assert str(path) in message
    assert "\n" not in message
    assert caught.value.exit_code == 2
    return message


def test_a_report_is_read_back(tmp_path: Path, report: Report) -> None:
    path = write_report(report, tmp_path)
    assert load_report(path).to_dict() == as_json(report)


def test_a_report_under_another_name(tmp_path: Path, report_text: str, report: Report) -> None:
    path = tmp_path / "baseline.json"
    path.write_text(report_text, encoding="utf-8")
    assert load_report(path).to_dict() == as_json(report)


def test_a_run_directory_stands_for_its_report(tmp_path: Path, report: Report) -> None:
    write_report(report, tmp_path)
    assert load_report(tmp_path).to_dict() == as_json(report)


def test_a_directory_without_a_report(tmp_path: Path) -> None:
    (tmp_path / "rank-0.jsonl").write_text("")
    message = refused(tmp_path)
    assert f"a directory without a {REPORT_FILE}" in message


def test_a_missing_file(tmp_path: Path) -> None:
    assert "no such report" in refused(tmp_path / "missing.json")


def test_a_file_that_is_not_text(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert "cannot read it" in refused(path)


def test_a_report_cut_in_half_is_truncated(tmp_path: Path, report_text: str) -> None:
    path = tmp_path / "half.json"
    path.write_text(report_text[: len(report_text) // 2], encoding="utf-8")
    assert ": truncated (" in refused(path)


@pytest.mark.parametrize(
    "cut_after",
    [
        '"verdict": ',  # before a value
        '"torchrun_exit_code": 0',  # after a number
        '"failures": [',  # inside a list
        '"verdict": "LEAK",',  # between keys
    ],
)
def test_a_report_cut_between_tokens_is_truncated(tmp_path: Path, report_text: str, cut_after: str) -> None:
    path = tmp_path / "cut.json"
    path.write_text(report_text[: report_text.index(cut_after) + len(cut_after)], encoding="utf-8")
    assert ": truncated (" in refused(path)


@pytest.mark.parametrize("cut_after", ['"verdict": "LE', '"verdi', '"launcher_cpu_s": nu'])
def test_a_report_cut_inside_a_token_is_truncated(tmp_path: Path, report_text: str, cut_after: str) -> None:
    path = tmp_path / "cut.json"
    path.write_text(report_text[: report_text.index(cut_after) + len(cut_after)], encoding="utf-8")
    assert ": truncated (" in refused(path)


@pytest.mark.parametrize(
    "text",
    [
        "hello, this is not a report\n",
        "status: completed\nverdict: LEAK\n",
        '{"schema_version": 1,, "ranks": []}',
    ],
)
def test_text_that_is_not_json(tmp_path: Path, text: str) -> None:
    path = tmp_path / "report.json"
    path.write_text(text, encoding="utf-8")
    assert ": not JSON (" in refused(path)


@pytest.mark.parametrize("text", ["[1, 2, 3]", '"a string"', "42", "null", '{"status": "completed"}'])
def test_json_that_is_not_a_report(tmp_path: Path, text: str) -> None:
    path = tmp_path / "report.json"
    path.write_text(text, encoding="utf-8")
    assert "not a hicache report (no schema_version)" in refused(path)


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 0, "1"])
def test_an_unknown_schema_version(tmp_path: Path, report: Report, version: object) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps({**report.to_dict(), "schema_version": version}), encoding="utf-8")
    message = refused(path)
    assert f"report schema version {version!r}" in message
    assert f"reads version {SCHEMA_VERSION}" in message


def test_a_schema_version_alone_is_not_a_report(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION}), encoding="utf-8")
    refused(path)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[" * 200_000, "JSON nested too deeply"),  # was: RecursionError, exit 1
        ('{"schema_version": ' + "[" * 200_000, "JSON nested too deeply"),
        ('{"a": ' + "1" * 5000 + "}", "Exceeds the limit"),  # was: ValueError, exit 1
    ],
)
def test_json_python_cannot_take_is_one_line(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "deep.json"
    path.write_text(text)
    assert says in refused(path)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path, no_hang: None) -> None:
    """Was: `report show FIFO` (and check --baseline, watch) blocked until a writer came."""
    path = tmp_path / "report.json"
    os.mkfifo(path)
    assert "a FIFO, not a regular file" in refused(path)
    assert "a FIFO, not a regular file" in refused(tmp_path)  # a run directory's report


def test_a_device_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.symlink_to("/dev/null")  # (/dev/zero, read whole, would never end)
    assert "a character device, not a regular file" in refused(path)
