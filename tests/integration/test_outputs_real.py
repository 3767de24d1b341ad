"""Real runs against what a shell and a shared machine hand them: stdout closed, a stdout that
cannot spell the run directory's name, two runs started at once on one run directory."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hicache_cli.sample import decode_lines
from tests.integration.helpers import FORK, REPO

pytestmark = pytest.mark.slow

STRESS = [sys.executable, "-m", "hicache_cli", "stress", "--no-live", "--duration", "1s", *FORK]


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), **extra)


def test_a_run_with_stdout_closed_completes_and_writes_its_report(tmp_path: Path) -> None:
    """Was: a traceback, exit 1, an empty run directory."""
    run_dir = tmp_path / "run"
    command = shlex.join([*STRESS, "--run-dir", str(run_dir)]) + " >&-"
    proc = subprocess.run(["sh", "-c", command], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert json.loads((run_dir / "report.json").read_text())["status"] == "completed"


def test_an_ascii_stdout_and_a_non_ascii_run_directory(tmp_path: Path) -> None:
    """PYTHONIOENCODING=ascii with `--run-dir run-café`: was a traceback, exit 1."""
    run_dir = tmp_path / "run-caf\u00e9"
    proc = subprocess.run(
        [*STRESS, "--run-dir", str(run_dir)],
        cwd=tmp_path,
        env=_env(PYTHONIOENCODING="ascii"),
        capture_output=True,
        timeout=120,
    )
    out, err = proc.stdout.decode("ascii"), proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "run-caf\\xe9" in out
    assert json.loads((run_dir / "report.json").read_text())["status"] == "completed"


def test_two_runs_started_at_once_on_one_run_dir(tmp_path: Path) -> None:
    """Both passed the check and interleaved their samples into one report; now one claims the
    directory and the other is refused in one line, exit 2."""
    run_dir = tmp_path / "run"
    procs = [
        subprocess.Popen(
            [*STRESS, "--run-dir", str(run_dir)],
            cwd=tmp_path,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    errors = [proc.communicate(timeout=120)[1] for proc in procs]
    results = sorted((proc.returncode, err) for proc, err in zip(procs, errors, strict=True))
    (ok, ok_err), (refused, refused_err) = results
    assert (ok, refused) == (0, 2), results
    (line,) = refused_err.splitlines()
    assert line.startswith(f"hicache: error: --run-dir {run_dir} already holds a run")
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "completed"
    for rank in (0, 1):  # every line from one rank process: nothing interleaved
        pids = {s.pid for s in decode_lines((run_dir / f"rank-{rank}.jsonl").read_text().splitlines())}
        assert pids == {report["ranks"][rank]["pid"]}


def _modes(run_dir: Path) -> dict[str, int]:
    """Each file's mode; every one a regular file (the stack FIFOs removed: one left would
    hang a `grep -r` or an archiver)."""
    found = {p.name: p.lstat().st_mode for p in run_dir.iterdir()}
    assert all(stat.S_ISREG(mode) for mode in found.values()), found
    return {name: stat.S_IMODE(mode) for name, mode in found.items()}


def test_a_real_runs_directory_and_files_are_private(tmp_path: Path) -> None:
    """Was 0755 / 0644 (issue 30, item 4): the command line in config.json and every rank's
    output readable by every local user. Ranks write their own files (rank-N.*) as the same user."""
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        ["sh", "-c", f"umask 022 && exec {shlex.join([*STRESS, '--run-dir', str(run_dir)])}"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    modes = _modes(run_dir)
    for name in ("config.json", "report.json", "torchrun.log", "rank-0.jsonl", "rank-1.log", ".hicache-run"):
        assert modes.pop(name) == 0o600, name
    assert set(modes.values()) == {0o600}, modes


def test_a_real_trace_keeps_its_files_private(tmp_path: Path) -> None:
    """A traced program's rank files, created by the tracer inside it, and its captured output."""
    from hicache_cli import trace

    program = REPO / "tests" / "integration" / "programs" / "leaky_p2p.py"
    old = os.umask(0o022)
    try:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        trace([*command, str(program), "--seconds", "1"], run_dir=tmp_path / "t", capture_output=True)
    finally:
        os.umask(old)
    modes = _modes(tmp_path / "t")
    assert modes.pop("program.log") == modes.pop("rank-0.jsonl") == modes.pop("rank-1.jsonl") == 0o600
    assert set(modes.values()) == {0o600}, modes
