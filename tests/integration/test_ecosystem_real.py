"""hicache in the places users already look, with the real CLI and real ranks: `--json` on
stdout with the text on stderr."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import hicache

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
