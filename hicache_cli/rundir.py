"""The run directory: the only contract between the ranks, the dashboard and the report.

Layout: config.json, rank-<N>.jsonl (samples), rank-<N>.log (everything a rank
printed), torchrun.log, report.json.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from hicache_cli.errors import UsageError

DEFAULT_ROOT = Path("hicache-runs")
REPORT_FILE = "report.json"
TORCHRUN_LOG = "torchrun.log"


def create_run_dir(requested: Path | None, policy: str) -> Path:
    """Make a fresh run directory (default ./hicache-runs/<time>-<policy>/) or fail clearly."""
    if requested is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = DEFAULT_ROOT / f"{stamp}-{policy}"
        suffix = 1
        while path.exists():
            suffix += 1
            path = DEFAULT_ROOT / f"{stamp}-{policy}-{suffix}"
    else:
        path = requested
        if path.exists() and any(path.glob("rank-*.jsonl")):
            raise UsageError(f"--run-dir {path} already holds a run; choose an empty or new directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("ok", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"cannot write the run directory {path}: {exc.strerror or exc}") from None
    return path


def write_atomically(path: Path, text: str) -> None:
    """Write `text` so that readers see the old file or the whole new one, never a part."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
