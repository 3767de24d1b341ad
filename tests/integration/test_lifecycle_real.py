"""How a real run ends when something outside stops it: a signal to hicache (SIGTERM from
`timeout` or CI, SIGHUP from a dropped ssh session, SIGKILL from the OOM killer) or to
torchrun alone. Every way ends within seconds, nothing left running, and the report (when
hicache lives to write one) matches what the run directory holds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.integration.helpers import PACED, REPO

pytestmark = pytest.mark.slow

ENDS_WITHIN_S = 8.0


def _start(tmp_path: Path, command: list[str] | None = None, cwd: Path | None = None) -> tuple[subprocess.Popen, Path]:
    """A 60 s reap run, returned once both ranks have sampled for a second."""
    run_dir = tmp_path / "run"
    base = command or [sys.executable, "-m", "hicache_cli"]
    proc = subprocess.Popen(
        [*base, "stress", "--no-live", "--run-dir", str(run_dir), "--duration", "60s", *PACED],
        cwd=cwd or tmp_path,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not all(_lines(run_dir, r) for r in (0, 1)):
        time.sleep(0.2)
    time.sleep(1.0)
    return proc, run_dir


def _lines(run_dir: Path, rank: int) -> list[dict]:
    path = run_dir / f"rank-{rank}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _tree(pid: int) -> list[psutil.Process]:
    proc = psutil.Process(pid)
    return [proc, *proc.children(recursive=True)]


def _left_running(procs: list[psutil.Process], within_s: float = ENDS_WITHIN_S) -> list[int]:
    deadline = time.monotonic() + within_s
    while True:
        left = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    left.append(p.pid)
            except psutil.Error:
                pass
        if not left or time.monotonic() > deadline:
            for pid in left:  # do not leave them to the next test
                psutil.Process(pid).kill()
            return left
        time.sleep(0.2)


def _torchrun(proc: subprocess.Popen) -> psutil.Process:
    return next(p for p in psutil.Process(proc.pid).children() if "torch.distributed.run" in " ".join(p.cmdline()))


def _report_matches_run_dir(run_dir: Path) -> dict:
    report = json.loads((run_dir / "report.json").read_text())
    for rank in report["ranks"]:
        lines = _lines(run_dir, rank["rank"])
        assert rank["samples"] == len(lines)
        assert lines[-1]["kind"] == "final"
    return report


@pytest.mark.parametrize(("signo", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_stop_signal_to_hicache_ends_like_ctrl_c(tmp_path: Path, signo: int, code: int) -> None:
    proc, run_dir = _start(tmp_path)
    procs = _tree(proc.pid)
    sent = time.monotonic()
    proc.send_signal(signo)
    out, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < ENDS_WITHIN_S
    assert proc.returncode == code, err
    assert not _left_running(procs)
    report = _report_matches_run_dir(run_dir)
    assert report["status"] == "interrupted"
    assert report["interruption"]["signal"] == signal.Signals(signo).name
    assert report["interruption"]["to"] == "hicache"
    assert "Traceback" not in out + err


def test_sigkill_to_hicache_takes_torchrun_and_every_rank_with_it(tmp_path: Path) -> None:
    proc, run_dir = _start(tmp_path)
    procs = _tree(proc.pid)
    assert len(procs) >= 4  # hicache, torchrun, two ranks
    proc.kill()
    proc.communicate(timeout=10)
    assert not _left_running(procs)
    for rank in (0, 1):  # the samples stay, each rank's last line says how it ended
        assert _lines(run_dir, rank)[-1]["kind"] == "final"


@pytest.mark.parametrize(("signo", "to", "code"), [(signal.SIGTERM, "ranks", 143), (signal.SIGKILL, "torchrun", 137)])
def test_a_signal_to_torchrun_alone_is_reported_as_it_happened(tmp_path: Path, signo: int, to: str, code: int) -> None:
    proc, run_dir = _start(tmp_path)
    procs = _tree(proc.pid)
    _torchrun(proc).send_signal(signo)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    assert not _left_running(procs, within_s=1.0)  # hicache waited for its ranks before it left
    report = _report_matches_run_dir(run_dir)
    assert report["status"] == "interrupted"
    assert report["interruption"]["to"] == to
    assert report["interruption"]["signal"] == signal.Signals(signo).name
    assert "Traceback" not in out + err


def test_modules_in_the_users_directory_do_not_shadow_hicaches(tmp_path: Path) -> None:
    """A hicache_model.py, cache.py, torch.py or hicache_cli/ where the user runs hicache is the user's business."""
    script = Path(sys.executable).with_name("hicache")
    if not script.exists():
        pytest.skip("needs the installed hicache entry point (python -m puts the directory first)")
    for name in ("hicache_model.py", "cache.py", "torch.py"):
        (tmp_path / name).write_text("raise ImportError('the user file was imported')\n")
    (tmp_path / "hicache_cli").mkdir()
    (tmp_path / "hicache_cli" / "__init__.py").write_text("raise ImportError('the user package was imported')\n")
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [str(script), "stress", "--no-live", "--run-dir", str(run_dir), "--duration", "2s", *PACED],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((run_dir / "report.json").read_text())["status"] == "completed"
