"""A run's report rebuilt from its run directory alone: after hicache was killed before it
wrote one, or to judge an old run again with a newer hicache.

Everything the report says about the ranks comes from their samples, so it is the report
the run would have written. What only the launching hicache knew is estimated or left
null, and the report's `rebuilt` object names those fields (REBUILT_FIELDS).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from hicache_cli.analysis.report import RunOutcome, build_report
from hicache_cli.analysis.torchrun_log import worker_exits_in
from hicache_cli.config import StressConfig
from hicache_cli.errors import UsageError
from hicache_cli.protocol import CONFIG_FILE
from hicache_cli.series import load_run
from hicache_cli.version import hicache_version

# Fields of a report that the launching hicache alone knew. Estimated: the launch time is
# config.json's modification time (written just before the launch) and the end the last
# sample's, so wall_s and startup_s are close but not the launcher's. Unknown (null): the
# CPU the launcher used, torchrun's or the program's exit status, why hicache stopped the
# program or the run early, and a stop signal sent to hicache itself. Not found again:
# the watchdog's stall and hang failures, which it decided from the clock while the run
# went on (rank exits torchrun logged are read back).
ESTIMATED = ("wall_s", "startup_s")
UNKNOWN = (
    "launcher_cpu_s",
    "torchrun_exit_code",
    "program_exit_code",
    "program_stopped",
    "stopped_early",
    "interruption (a signal to hicache)",
    "failures found by the watchdog (stall, hang)",
)


def rebuild_report(run_dir: Path) -> dict[str, Any]:
    """The report of the run in `run_dir`, from its config.json and rank files."""
    config = _config(run_dir)
    run = load_run(run_dir)
    if not any(run.samples.values()):
        raise UsageError(f"{run_dir}: no samples to build a report from (no rank-N.jsonl with a complete line)")
    launched = (run_dir / CONFIG_FILE).stat().st_mtime
    last = max(s[-1].wall for s in run.samples.values() if s)
    outcome = RunOutcome(
        torchrun_exit_code=None,
        wall_s=max(0.0, last - launched),
        launcher_cpu_s=None,
        launched_wall=launched,
        worker_exits=worker_exits_in(run_dir),
    )
    report = build_report(config, run, outcome, run_dir)
    report["rebuilt"] = {
        "at": round(time.time(), 3),
        "hicache_version": hicache_version(),
        "estimated": list(ESTIMATED),
        "unknown": list(UNKNOWN),
    }
    return report


def _config(run_dir: Path) -> StressConfig:
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run directory")
    path = run_dir / CONFIG_FILE
    try:
        return StressConfig.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise UsageError(f"{run_dir}: not a run directory (no {CONFIG_FILE})") from None
    except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError) as exc:
        raise UsageError(f"{path}: not a run's config ({exc})") from None
