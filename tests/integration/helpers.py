"""Running the real CLI in a subprocess and watching its ranks from outside."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def hicache(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "hicache_cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@dataclass
class ExternalRss:
    """RSS of the rank processes read from /proc by this test process, not by the ranks."""

    points: dict[int, list[tuple[float, int]]] = field(default_factory=dict)  # pid -> (wall, bytes)


def _watch_rss(run_dir: Path, stop: threading.Event, out: ExternalRss) -> None:
    pids: set[int] = set()
    while not stop.is_set():
        for path in run_dir.glob("rank-*.jsonl"):
            with path.open() as fh:
                first = fh.readline()
            if first.endswith("\n"):
                pids.add(json.loads(first)["pid"])
        for pid in pids:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            rss = [int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")]
            if not rss:  # a zombie has no memory lines
                continue
            kb = rss[0]
            out.points.setdefault(pid, []).append((time.time(), kb * 1024))
        stop.wait(0.2)


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    run_dir: Path
    report: dict[str, Any]
    external: ExternalRss


def stress_run(tmp: Path, *args: str) -> Run:
    run_dir = tmp / "run"
    external = ExternalRss()
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_rss, args=(run_dir, stop, external), daemon=True)
    watcher.start()
    try:
        proc = hicache("stress", "--no-live", "--run-dir", str(run_dir), *args, cwd=tmp)
    finally:
        stop.set()
        watcher.join()
    report = json.loads((run_dir / "report.json").read_text())
    return Run(proc, run_dir, report, external)
