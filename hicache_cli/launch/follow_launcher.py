"""`hicache attach --follow PID...`: processes followed until hicache is stopped or they are
gone, a strategy of the supervisor (supervisor.follow) like an attach's (attach_launcher.py).

Two things differ. The agents stay at a cost the processes cannot measure: a census every
few seconds, the tracer's hooks only for a window when a holder grows (attach/follow.py).
And every RESCAN_S the processes below the pids are looked at again: a rank started later
(or restarted by its launcher), or one that had no process group yet, is attached too, on
a thread of its own so the views go on meanwhile. The holders are counted last at the
agents' latest census ("live"), unless they took one as they detached.
"""

from __future__ import annotations

import threading

from hicache_cli.launch.attach_launcher import AttachedProcesses, AttachLaunch
from hicache_cli.launch.supervisor import Stop
from hicache_cli.lifecycle import process_start
from hicache_cli.sample import Sample

RESCAN_S = 5.0
SCAN_JOIN_S = 3.0  # at the stop: how long a scan under way has to end (its debuggers are cancelled)


class FollowedProcesses(AttachedProcesses):
    LAST = ("end", "live")

    def __init__(self, launch: AttachLaunch) -> None:
        super().__init__(launch)
        self.scan: threading.Thread | None = None
        self.next_scan = 0.0
        self.given: list[tuple[int, str | None]] = []  # the pids asked for, with their start times

    def check(self, samples: dict[int, list[Sample]], now: float) -> Stop | None:
        idle = self.scan is None or not self.scan.is_alive()
        if self.started is not None and idle and now >= self.next_scan and not self.session.cancel.is_set():
            self.next_scan = now + RESCAN_S
            self.scan = threading.Thread(target=self.attach_more, name="hicache-follow-scan", daemon=True)
            self.scan.start()
        return super().check(samples, now)

    def attach_more(self) -> None:
        for target in self.session.attach_more():
            if self.launch.on_attached is not None:
                self.launch.on_attached(self.processes_of([target])[0])

    def start(self) -> None:
        self.given = [(pid, process_start(pid)) for pid in self.launch.target.pids]
        super().start()

    def exited(self) -> bool:
        """Every process attached is gone, and so is every pid asked for (a launcher whose
        ranks have not come yet, or are being restarted, is waited for)."""
        if self.scan is not None and self.scan.is_alive():
            return False
        return super().exited() and all(process_start(pid) != start for pid, start in self.given)

    def stop(self, stop: Stop | None) -> None:
        self.session.cancel.set()  # a scan under way: its debuggers end, nothing more is injected
        if self.scan is not None:
            self.scan.join(SCAN_JOIN_S)
        super().stop(stop)
