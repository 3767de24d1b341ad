"""What torchrun says about its workers when they fail: rank, exit code, signal.

torchrun prints a failure summary (ChildFailedError) with, per failed rank, lines like
`rank      : 2 (local_rank: 2)` and `exitcode  : -9 (pid: 1234)`; a negative exit code is
the signal that ended the process. Reading it is the only way to learn a SIGKILLed
rank's fate: it is torchrun's child, not ours, and it wrote nothing itself.
"""

from __future__ import annotations

import re
from pathlib import Path

from hicache_cli.outcome import WorkerExit, signal_name
from hicache_cli.protocol import TORCHRUN_LOG
from hicache_cli.rundir import read_run_text

_ENTRY = re.compile(r"rank\s*:\s*(?P<rank>\d+)\s*\(local_rank[^)]*\)\s*\n\s*exitcode\s*:\s*(?P<code>-?\d+)")


def worker_exits(log_text: str) -> dict[int, WorkerExit]:
    """Exit codes by rank from torchrun's failure summary; empty when there is none."""
    exits = {}
    for m in _ENTRY.finditer(log_text):
        code = int(m["code"])
        exits[int(m["rank"])] = WorkerExit(int(m["rank"]), code, signal_name(code))
    return exits


def worker_exits_in(run_dir: Path) -> dict[int, WorkerExit]:
    """The failed workers that torchrun's log in `run_dir` names (none if there is no log)."""
    try:
        text = read_run_text(run_dir / TORCHRUN_LOG)
    except OSError:
        return {}
    return worker_exits(text)
