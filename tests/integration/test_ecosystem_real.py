"""hicache in the places users already look, with the real CLI and real ranks: `--json` on
stdout with the text on stderr."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.helpers import Run, hicache

pytestmark = pytest.mark.slow

PROGRAMS = Path(__file__).resolve().parent / "programs"


def test_stress_json_is_the_report_on_stdout_and_text_on_stderr(tmp_path: Path) -> None:
    run_dir = tmp_path / ("run-" + "long" * 50)  # a line far past 160 columns
    args = ("stress", "--json", "--pp", "2", "--policy", "drain", "--duration", "3s", "--run-dir", str(run_dir))
    proc = hicache(*args, cwd=tmp_path, env={"COLUMNS": ""})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # the whole of stdout is one document
    assert report == json.loads((run_dir / "report.json").read_text())
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert "hicache stress: drain" in proc.stderr and "rank 0: " in proc.stderr
    assert f"run directory: {run_dir}\n" in proc.stderr  # off a terminal, not wrapped


def test_trace_json_sends_the_programs_output_to_stderr(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    command = (sys.executable, str(PROGRAMS / "no_dist.py"), "--exit-code", "5")
    proc = hicache("trace", "--json", "--run-dir", str(run_dir), "--", *command, cwd=tmp_path)
    assert proc.returncode == 5  # the program's, as without --json
    report = json.loads(proc.stdout)
    assert report["program_exit_code"] == 5 and report["target"]["kind"] == "trace"
    assert "no_dist: hello on stdout" in proc.stderr and "no_dist: hello on stderr" in proc.stderr
    assert "hicache trace:" in proc.stderr


def assertions(doc: dict[str, Any], passed: bool | None) -> set[tuple[int | None, str]]:
    return {(a["rank"], a["name"]) for a in doc["assertions"] if a["passed"] is passed}


def test_a_rerun_of_the_baselines_configuration_passes(drain_pp2: Run, tmp_path: Path) -> None:
    """The baseline: drain_pp2's 8 s of `drain`. Its own configuration again: noise is no
    regression. (--max-rss-slope 1GB/h: 8 s is short for the absolute verdict; the baseline
    assertions are what is tested.)"""
    base = drain_pp2.run_dir / "report.json"
    args = ("check", "--json", "--policy", "drain", "--duration", "8s", "--max-rss-slope", "1GB/h")
    proc = hicache(*args, "--baseline", str(base), "--run-dir", str(tmp_path / "run"), cwd=tmp_path)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    compared = {(r, n) for r in (0, 1) for n in ("baseline-slope", "baseline-depth", "baseline-p99")}
    assert compared <= assertions(doc, True)
    assert doc["baseline"]["report"] == str(base)


def test_a_slower_loop_than_the_baseline_fails_on_the_baseline_alone(drain_pp2: Run, tmp_path: Path) -> None:
    """Rank 0 sleeping 100 ms a round (--fault, which stands for slower code under test): rank
    1's loop, waiting on it, is far slower than the baseline's; nothing else fails."""
    base = drain_pp2.run_dir / "report.json"
    args = ("check", "--json", "--policy", "drain", "--duration", "6s", "--max-rss-slope", "1GB/h")
    run_dir = str(tmp_path / "run")
    proc = hicache(*args, "--fault", "lag:0:100", "--baseline", str(base), "--run-dir", run_dir, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["result"] == "FAIL"
    failed = assertions(doc, False)
    assert (1, "baseline-p99") in failed and {name for _, name in failed} == {"baseline-p99"}
    message = next(a["message"] for a in doc["assertions"] if (a["rank"], a["name"]) == (1, "baseline-p99"))
    assert message.startswith("rank 1 loop p99 ") and f"baseline {base}'s" in message
    assert "FAIL  baseline-p99" in proc.stderr
