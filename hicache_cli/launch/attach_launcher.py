"""`hicache attach PID...`: processes hicache did not start, a strategy of the supervisor
(supervisor.follow).

start: the agent injected into each pid and every Python process below it with a process
group (attach/session.py), then their census read; exited: every attached process is gone;
stop: detach (the stop file; each agent puts everything back), then the census each took as
it detached. Nothing is ever signalled: the strategy's ProcessTree holds nothing, its
watchdog is off (the watchdog asks stuck processes for their stacks with SIGUSR1, whose
default would kill a program that did not arm it), and `pids_of` names no process.

How a process that ended while attached ended: the kernel's process events say its exit
status where hicache may listen (attach/exits.py); else its own final line says what it
knew (an exception, `os._exit(N)`, a normal exit); else nobody can tell, and it says so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from hicache_cli.attach import protocol
from hicache_cli.attach.exits import ExitWatch
from hicache_cli.attach.protocol import Census
from hicache_cli.attach.session import AttachSession, Target, check
from hicache_cli.attached import AttachedPid, CensusCost, HolderCount, PolledBefore, ProcessEnd, place_text
from hicache_cli.config import RunConfig
from hicache_cli.files import open_regular
from hicache_cli.launch.supervisor import ProcessTree, Stop, Watchdog
from hicache_cli.lifecycle import owner_token
from hicache_cli.outcome import RunOutcome
from hicache_cli.protocol import EXITED
from hicache_cli.sample import Sample
from hicache_cli.series import RunFollower
from hicache_cli.targets import AttachedProcess, FollowedProcess

OnAttached = Callable[[AttachedPid], None]  # told of each process tried, once its census is read
# A process injected that had not run the text when hicache stopped (Ctrl-C during the attach):
# if it ever does, it finds the stop file and refuses.
UNANSWERED = "unanswered"
NOT_YET = "it had not run the injected text when hicache stopped (if it ever does, it refuses)"
DETACH_WAIT_S = 60.0  # how long each agent has to detach (and take its census) when asked
INTERRUPTED_WAIT_S = 3.0  # the same when hicache was stopped by a signal: it ends within seconds


def attached_config(
    pids: list[int],
    duration_s: float | None,
    probe_hz: float,
    warmup_s: float | None,
    leak_threshold_mb_per_h: float,
    census: bool = True,
    stall_timeout_s: float = 60.0,
    follow: tuple[float, float] | None = None,
) -> RunConfig:
    """The config of an attach (duration None: until stopped or every process is gone); with
    `follow` (census every, tracer window, in seconds) a follow's (attach/follow.py). Bad
    values, and what /proc, the debugger and the kernel's ptrace rules already refuse, raise
    UsageError (AttachRefused) in one line before anything is created or touched."""
    target = (
        AttachedProcess(pids=tuple(pids), census=census)
        if follow is None
        else FollowedProcess(pids=tuple(pids), census=census, census_every_s=follow[0], window_s=follow[1])
    )
    config = RunConfig(
        target=target,
        duration_s=duration_s,
        probe_hz=probe_hz,
        warmup_s=warmup_s,
        leak_threshold_mb_per_h=leak_threshold_mb_per_h,
        stall_timeout_s=stall_timeout_s,
    ).validate()
    check(list(pids))
    return config


@dataclass(frozen=True)
class AttachLaunch:
    run_dir: Path
    config: RunConfig  # its target an AttachedProcess
    on_attached: OnAttached | None = None

    @property
    def target(self) -> AttachedProcess:
        assert isinstance(self.config.target, AttachedProcess)
        return self.config.target


class AttachedProcesses:
    """The supervisor's strategy for processes already running: attached, followed, detached;
    ended by the duration, a settled verdict, a stop signal to hicache, or their own exits."""

    LAST = ("end",)  # the census a process's holders are counted at last: the one at detach

    def __init__(self, launch: AttachLaunch) -> None:
        self.launch = launch
        target = launch.target
        self.follower = RunFollower(launch.run_dir)
        self.tree = ProcessTree()  # holds nothing: an attached process is not hicache's to signal
        self.watchdog: Watchdog | None = None
        self.session = AttachSession(
            list(target.pids),
            launch.run_dir,
            launch.config.probe_hz,
            census=target.census,
            answer_s=target.answer_s,
            owner=owner_token(),
            follow=target.follow,
        )
        self.started: float | None = None
        self.exits = ExitWatch()

    def pids_of(self, samples: dict[int, list[Sample]]) -> list[int]:
        return []  # never put into the tree: nothing of it is ever signalled

    def start(self) -> None:
        self.exits.start()  # before any process can end attached
        self.session.start()
        if self.launch.target.census:
            self.session.census()
        self.started = time.monotonic()
        if self.launch.on_attached is not None:
            for process in self.processes():
                self.launch.on_attached(process)

    def exited(self) -> bool:
        return self.started is not None and not self.session.running()

    def check(self, samples: dict[int, list[Sample]], now: float) -> Stop | None:
        duration = self.launch.config.duration_s
        if self.started is not None and duration is not None and now - self.started >= duration:
            return Stop(f"reached the duration ({duration:g} s)")
        return None

    def may_stop_early(self, samples: dict[int, list[Sample]]) -> bool:
        return bool(samples)

    def stop_early(self, samples: dict[int, list[Sample]], reason: str, now: float) -> Stop | None:
        return Stop(reason)

    def stop(self, stop: Stop | None) -> None:
        """Detach every agent (they put back what they changed), then read the census each
        took as it detached. The processes run on. Stopped by a signal, hicache waits for
        each only a few seconds: an agent that has not answered by then detaches on its own
        once hicache is gone (its lifeline)."""
        interrupted = stop is not None and stop.interrupted
        self.session.detach(INTERRUPTED_WAIT_S if interrupted else DETACH_WAIT_S)
        if self.launch.target.census:
            self.session.census_end(INTERRUPTED_WAIT_S if interrupted else DETACH_WAIT_S)

    def outcome(self, stop: Stop | None) -> RunOutcome:
        processes = self.processes(ending=True)
        self.exits.close()
        return RunOutcome(
            exit_code=None,  # not ours: an attached process's exit code is its parent's to read
            stopped=stop.reason if stop is not None else None,
            attached=processes,
        )

    def processes(self, ending: bool = False) -> tuple[AttachedPid, ...]:
        """Each process tried, as the run directory and the injection say it now; with
        `ending`, how each that is gone ended."""
        return self.processes_of(self.session.targets, ending)

    def processes_of(self, targets: list[Target], ending: bool = False) -> tuple[AttachedPid, ...]:
        out = []
        for target in targets:
            status = self.session.status(target.pid)
            last = next(filter(None, (self.session.read_census(target, when) for when in self.LAST)), None)
            process = attached_pid(target, status, self.session.read_census(target, "start"), last)
            if ending:
                process = replace(process, ended=self.ended(target, status))
            out.append(process)
        return tuple(out)

    def ended(self, target: Target, status: protocol.AgentStatus | None) -> ProcessEnd | None:
        """How a process attached to ended (None: it runs on, or hicache had left it before)."""
        if not target.attached or target.alive():
            return None
        if status is not None and status.state == protocol.DETACHED and status.detach_reason != EXITED:
            return None  # detached while it ran: whatever came later is not this run's
        last = final_line(self.launch.run_dir, target, status)
        if (seen := self.exits.ended(target.pid)) is not None:
            if seen.signal is not None:
                return ProcessEnd(
                    "killed", signal=seen.signal, told_by="kernel", note=killed_after_exit(seen.signal, last)
                )
            return ProcessEnd("exited", exit_code=seen.exit_code, told_by="kernel")
        why_not = self.exits.refusal or "the kernel's process events did not report it"
        if last is None or last.get("kind") != "final":
            note = f"it left no last line (a signal or a crash?), and {why_not}; it is not hicache's child"
            return ProcessEnd("unknown", told_by="nobody", note=note)
        said, code = last.get("message"), last.get("exit_code")
        if code is None:
            said = f"{said}: its exit code is its parent's to read ({why_not})"
        return ProcessEnd("exited", exit_code=code if type(code) is int else None, told_by="process", note=said)


def attached_pid(
    target: Target, status: protocol.AgentStatus | None, start: Census | None, end: Census | None
) -> AttachedPid:
    """One process tried: its agent's last status, its censuses merged by holder."""
    status = status or target.status
    cost = start.cost if start is not None else None
    return AttachedPid(
        pid=target.pid,
        name=target.info.name,
        rank=status.rank if status else None,
        state=status.state if status else (protocol.REFUSED if target.refusal else UNANSWERED),
        reason=target.unreadable
        or (status.reason if status else None)
        or target.refusal
        or (None if status else NOT_YET),
        method=target.injected.method if target.injected else None,
        inject_s=round(target.injected.seconds, 3) if target.injected else None,
        census_s=round(start.taken_at - status.attached_at, 3) if start and status and status.attached_at else None,
        works=start.works if start else None,
        works_end=end.works if end else None,
        holders=holders(start, end),
        cost=CensusCost(
            objects=cost.objects,
            snapshot_s=round(cost.snapshot_s, 4),
            frozen=cost.frozen,
            unseen=cost.unseen,
            busy_s=round(cost.busy_s, 4),
            max_hold_s=round(cost.max_hold_s, 4),
            walk_s=round(cost.walk_s, 4),
            pause_per_million_s=round(cost.pause_per_million_s, 4) if cost.objects else None,
            truncated=cost.truncated,
        )
        if cost is not None
        else None,
        detach_reason=status.detach_reason if status else None,
        leftovers=list(status.leftovers) if status else [],
        polled_before=PolledBefore.from_dict(status.polled_before) if status and status.polled_before else None,
    )


def holders(start: Census | None, end: Census | None) -> list[HolderCount]:
    """The holders at attach, each with its count at detach (0 when it was gone by then), and
    those that appeared while attached; most held first."""
    before = {h.path: h for h in start.holders} if start else {}
    after = {h.path: h for h in end.holders} if end else {}
    hours = (end.taken_at - start.taken_at) / 3600 if start and end and end.taken_at > start.taken_at else None
    out = []
    for path in [*before, *(p for p in after if p not in before)]:
        first, last = before.get(path), after.get(path)
        latest = last or first
        assert latest is not None
        works, completed = (first.works, first.completed) if first else (0, 0)
        works_end = (last.works if last else 0) if end is not None else None
        out.append(
            HolderCount(
                path=path,
                container=latest.container,
                works=works,
                completed=completed,
                containers=latest.containers,
                tensor_bytes=latest.tensor_bytes,
                named=latest.named,
                works_end=works_end,
                completed_end=(last.completed if last else 0) if end is not None else None,
                growth=works_end - works if works_end is not None else None,
                per_hour=round((works_end - works) / hours, 1) if works_end is not None and hours else None,
                sites=[place_text(*site[:3]) for site in (last.sites or [])] if last is not None else [],
            )
        )
    return sorted(out, key=lambda h: -h.held)


def killed_after_exit(signal: str, last: dict[str, object] | None) -> str | None:
    """Where a process killed after its exit hooks had run (its last line: the process exited)
    died: as its interpreter finalized. SIGABRT there with a gloo process group left up is
    torch's exit race: a gloo worker thread drops the last Work of a collective just completed,
    the tensor's Python object needs the GIL, the finalizing interpreter ends the thread inside
    a C++ destructor, and std::terminate aborts the process (docs/attach.md)."""
    if last is None or last.get("kind") != "final" or last.get("message") != EXITED:
        return None
    said = "after its exit hooks had run (its last line: the process exited), as its interpreter finalized"
    if signal != "SIGABRT" or last.get("group_left_up") is not True:
        return said
    return (f"{said}, its process group left up: torch's exit race aborts such a program without hicache too "
            "(pytorch/pytorch#190489); destroy_process_group() before exit avoids it")  # fmt: skip


def final_line(run_dir: Path, target: Target, status: protocol.AgentStatus | None) -> dict[str, object] | None:
    """The last line of an attached process's rank file, as written (its event fields: kind,
    message, exit_code are in the line itself), read as its user's file (files.open_regular:
    no link, no FIFO, one link), its last 64 KB only."""
    if status is None or not status.rank_file:
        return None
    path = protocol.agent_dir(run_dir) / Path(status.rank_file).name
    try:
        with open_regular(path, follow=False, owners={target.info.uid}) as lines:
            lines.seek(max(0, lines.seek(0, 2) - 65536))
            last = lines.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
        found = json.loads(last)
    except (OSError, ValueError, RecursionError):
        return None
    return found if isinstance(found, dict) else None
