"""`--json`: one JSON document on stdout, every human line on stderr, exit codes unchanged.
Through main(), on synthetic runs (conftest's FakeExecute: no ranks start)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.cli import configure
from hicache_cli.cli.commands import sglang_scan as scan_command
from hicache_cli.cli.main import main
from hicache_cli.cli.options import Ranks
from hicache_cli.sglang_target.extract import NotApplicable
from tests.conftest import FakeExecute


@pytest.fixture(autouse=True)
def in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)


def document(capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], str]:
    """stdout parsed as one JSON document (nothing else may be there), and stderr."""
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def test_stress_prints_its_report(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert main(["stress", "--json", "--policy", "reap", "--duration", "20s", "--run-dir", str(run)]) == 0
    report, err = document(capsys)
    assert report == json.loads((run / "report.json").read_text())
    assert report["verdict"] == "LEAK"
    assert "hicache stress: reap" in err and "rank 0: LEAK" in err and f"report: {run / 'report.json'}" in err


def test_stress_exit_code_is_unchanged(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_execute.final = False  # the ranks crashed: the run failed, exit 3
    assert main(["stress", "--json", "--duration", "20s", "--run-dir", str(tmp_path / "run")]) == 3
    report, _ = document(capsys)
    assert report["status"] == "failed"


def test_check_prints_result_assertions_and_report(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["check", "--json", "--policy", "reap", "--max-depth", "2", "--run-dir", str(tmp_path / "run")]
    assert main(argv) == 1
    doc, err = document(capsys)
    assert doc["kind"] == "check" and doc["schema_version"] == 1
    assert doc["result"] == "FAIL"
    assert doc["thresholds"] == {
        "max_rss_slope_mb_per_h": 200.0,
        "max_depth": 2,
        "max_p99_ms": None,
        "rss_slope_given": False,  # the default: a traced program's memory is not gated
    }
    failed = {(a["rank"], a["name"]) for a in doc["assertions"] if a["passed"] is False}
    assert failed == {(0, "bounded"), (0, "max-depth")}
    assert doc["report"]["verdict"] == "LEAK"
    assert "hicache check FAIL" in err


def test_check_annotations_go_to_stderr_under_json(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert main(["check", "--json", "--policy", "reap", "--run-dir", str(tmp_path / "run")]) == 1
    doc, err = document(capsys)
    assert doc["result"] == "FAIL"
    assert any(line.startswith("::error ") for line in err.splitlines())


def test_compare_policies_prints_the_bundle(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parent = tmp_path / "c"
    argv = ["compare-policies", "--json", "--policies", "reap,drain", "--duration", "10s", "--run-dir", str(parent)]
    assert main(argv) == 0
    bundle, err = document(capsys)
    assert bundle == json.loads((parent / "compare.json").read_text())
    assert [p["policy"] for p in bundle["policies"]] == ["reap", "drain"]
    assert "RSS MB/h" in err  # the table


def test_sglang_scan_prints_the_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release without a PP-sync path: no run, one row; the bundle on stdout all the same."""

    def not_applicable(ranks: Ranks, *args: Any, **kwargs: Any) -> Any:
        if ranks.target.startswith("sglang=="):  # the per-release call (the first checks the shared options)
            raise NotApplicable("no _pp_sync")
        return None

    monkeypatch.setattr(scan_command, "release_versions", lambda say: ["0.5.12"])
    monkeypatch.setattr(configure, "ranks_config", not_applicable)
    assert main(["sglang-scan", "--json", "--versions", "0.5.12", "--run-dir", str(tmp_path / "s")]) == 0
    bundle, err = document(capsys)
    assert bundle["kind"] == "sglang-scan"
    assert [v["version"] for v in bundle["versions"]] == ["0.5.12"]
    assert "not applicable" in err


def test_bad_input_prints_no_document(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stress", "--json", "--pp", "0"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("hicache: error: --pp")
