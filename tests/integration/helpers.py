"""Running the real CLI in a subprocess and watching its ranks from outside."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.rss_crosscheck import ExternalRss, watch_rss

REPO = Path(__file__).resolve().parents[2]


def sigint_as_at_a_terminal() -> None:
    """A child's `preexec_fn`: SIGINT back to its default, so Python in the child turns it
    into KeyboardInterrupt, as Ctrl-C at a terminal would. A suite run as a background job
    (`pytest ... &` from a script) ignores SIGINT, and children inherit that; the CLI
    installs its own handler, but a library or pytest rightly keeps what it inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def hicache(
    *args: str, cwd: Path, timeout: float = 180, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess; `env` is added to (or, a value of "", taken from) ours."""
    env = {k: v for k, v in {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}.items() if v != ""}
    return subprocess.run(
        [sys.executable, "-m", "hicache_cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


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
    watcher = threading.Thread(target=watch_rss, args=(run_dir, stop, external), daemon=True)
    watcher.start()
    try:
        proc = hicache("stress", "--no-live", "--run-dir", str(run_dir), *args, cwd=tmp)
    finally:
        stop.set()
        watcher.join()
    report = json.loads((run_dir / "report.json").read_text())
    return Run(proc, run_dir, report, external)
