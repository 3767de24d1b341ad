"""How a run ended, as the supervisor saw it: what analysis turns into the report's status,
failures and root cause. One type, made by the supervisor's strategies (launch/) and read by
the report (analysis/report.py). Stdlib only."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field, replace
from typing import Any

from hicache_cli.attached import AttachedPid
from hicache_cli.series import RunSeries
from hicache_cli.watchdog import Stall


@dataclass(frozen=True)
class WorkerExit:
    """A rank's exit as torchrun reported it (its own child: the only word on a SIGKILLed rank)."""

    rank: int
    exit_code: int | None
    signal: str | None  # e.g. "SIGKILL" when the exit code was -9


def signal_name(exit_code: int) -> str | None:
    """The signal a negative exit code stands for (`-9`: SIGKILL); None for a plain exit."""
    if exit_code >= 0:
        return None
    try:
        return signal.Signals(-exit_code).name
    except ValueError:
        return f"signal {-exit_code}"


@dataclass(frozen=True)
class RunOutcome:
    interrupted: bool = False  # hicache itself was asked to stop
    interrupted_by: str | None = None  # the signal it got (SIGINT, SIGTERM, SIGHUP)
    stopped: str | None = None  # hicache stopped the target itself, and why (a deadline, the watchdog, ...)
    exit_code: int | None = 0  # the target's own: torchrun's (None when stopped), the traced program's
    wall_s: float = 0.0
    launcher_cpu_s: float | None = None  # CPU the launching process used (follower, views)
    stalls: tuple[Stall, ...] = ()  # what the watchdog found, when it ended the run
    stopped_early: str | None = None  # why the run was ended before its duration (a settled verdict)
    launched_wall: float | None = None  # time.time() when the target was started
    worker_exits: dict[int, WorkerExit] = field(default_factory=dict)  # torchrun's word on its ranks (every node's)
    lost_nodes: dict[int, str] = field(default_factory=dict)  # across nodes, on node 0: node -> how it was lost
    link_error: str | None = None  # another node: why its samples stopped reaching node 0
    followed: RunSeries | None = None  # every sample read while following, to the last line (bounded)
    attached: tuple[AttachedPid, ...] = ()  # hicache attach: each process tried, how it went, its census

    @property
    def killed(self) -> bool:
        return self.stopped is not None

    def with_run(self, **changes: Any) -> RunOutcome:
        """The strategy's outcome with what the follow loop saw (wall time, interruption, ...)."""
        if changes.get("interrupted_by") is not None:
            changes["interrupted"] = True
        return replace(self, **changes)
