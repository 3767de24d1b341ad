"""`hicache attach`'s library: attach to live processes, read their census, detach.

    session = AttachSession([pid], run_dir)
    targets = session.start()       # injected, each agent answered: attached or refused
    censuses = session.census()     # {pid: Census}, the Works each held when it attached
    ...                             # rank-N.jsonl fill with samples, as under hicache trace
    statuses = session.detach()     # {pid: AgentStatus}: hooks removed, thread ended

A PID may be a rank or a parent (a torchrun agent, an SGLang launcher): every Python
process at or below it that has torch loaded is injected (in parallel), and those whose
agent finds a process group stay attached; the others answer "no process group" and are
left at once, having imported nothing of hicache. If hicache goes away without detaching
(SIGKILL), each agent notices within a second (its lifeline on hicache's pid) and detaches
itself.

The launcher side: stdlib only, no torch; it never signals a target.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hicache_cli
from hicache_cli.attach import inject, procs, protocol
from hicache_cli.attach.procs import ProcessInfo
from hicache_cli.attach.protocol import AgentStatus, BootArgs, Census
from hicache_cli.errors import AttachRefused
from hicache_cli.files import DIR_MODE
from hicache_cli.lifecycle import owner_token, process_start
from hicache_cli.records import ShapeError
from hicache_cli.rundir import touch_run_file

ROOT = str(Path(hicache_cli.__file__).resolve().parent.parent)
ANSWER_S = 30.0  # how long an injected process has to reach a safe point and answer
LAUNCHER_GRACE_S = 2.0  # ... a launcher whose ranks have all answered: this much after them
POLL_S = 0.05
# attach --follow: a process that had no process group yet is injected again once its age has
# doubled (a rank waiting for peers on other nodes makes its group late; a launcher never
# does), while it is younger than RETRY_YOUNGER_S: at ages 10, 20, 40, 80 and 160 s at most
RETRY_YOUNGER_S = 300.0
YOUNG_S = 10.0  # attach --follow: a process this young is still importing: looked at next scan


def out_of_reach(who: ProcessInfo) -> str | None:
    """Why `who` could not import hicache's agent from ROOT: the boot script must be readable and
    ROOT and each package directory below it listable (the import lists each one), in words."""
    package = Path(hicache_cli.__file__).resolve().parent
    places = [
        inject.BOOT,
        Path(ROOT),
        package,
        *sorted(d for d in package.rglob("*") if d.is_dir() and d.name != "__pycache__"),
    ]
    return next((why for path in places if (why := procs.can_reach(path, who, read=True)) is not None), None)


@dataclass
class Target:
    """One process hicache tried to attach to."""

    info: ProcessInfo
    start: str | None  # its start time (with the pid, names it even after pid reuse)
    status: AgentStatus | None = None
    injected: inject.Injected | None = None
    refusal: str | None = None  # why it is not attached (ours or the agent's), in words
    # what hicache refused to read of its agent's (a link, a FIFO, another user's file, garbage):
    # from then on nothing more of it is read or waited for
    unreadable: str | None = None
    attached: bool = False  # its agent said so (it stays True once detached: a census was taken)
    tried_at_s: float = 0.0  # its age when last injected (attach --follow tries a young one again)
    # attach --follow: injected, its main thread not back in Python yet (a rank in
    # init_process_group waiting for its peers): its answer is looked for at every scan
    waiting: bool = False

    @property
    def pid(self) -> int:
        return self.info.pid

    def alive(self) -> bool:
        return self.start is not None and process_start(self.pid) == self.start


def retry_due(target: Target, age_s: float) -> bool:
    """attach --follow: inject again a process that answered it had no process group yet, once
    its age has doubled since, while it is young: a rank between importing torch and
    init_process_group, however long its peers take to come (a launcher never makes one: a
    few tries, then left alone)."""
    if target.refusal not in (protocol.NO_GROUP, protocol.NO_TORCH) or target.unreadable:
        return False
    return 2 * target.tried_at_s <= age_s < RETRY_YOUNGER_S


class AttachSession:
    def __init__(
        self,
        pids: list[int],
        run_dir: Path,
        hz: float = 10.0,
        census: bool = True,
        tracer: bool = True,
        answer_s: float = ANSWER_S,
        owner: str | None = None,
        follow: tuple[float, float] | None = None,
    ) -> None:
        self.pids = pids
        self.run_dir = run_dir
        follow_s, window_s = follow or (None, BootArgs.window_s)
        self.boot = BootArgs(
            str(run_dir.resolve()), ROOT, owner or owner_token(), hz, census, tracer, follow_s, window_s
        )
        self.answer_s = answer_s
        self.targets: list[Target] = []
        self.cancel = threading.Event()  # set when hicache is stopped: every debugger still running ends

    # -- start: resolve, inject, wait for answers -----------------------------------------

    def start(self) -> list[Target]:
        """Inject into every candidate and wait for each answer; the attached targets.
        AttachRefused (one line, exit 2) when none could be attached (a follow's: none yet). A stop signal
        (KeyboardInterrupt) ends every debugger still running within seconds, then goes on up."""
        candidates = resolve(self.pids)
        self.targets = [Target(info, process_start(info.pid), tried_at_s=procs.age_s(info.pid)) for info in candidates]
        self._make_agent_dir()
        pool = ThreadPoolExecutor(max_workers=min(8, len(self.targets)))
        try:
            for future in [pool.submit(self._inject, target) for target in self.targets]:
                future.result()
            self._await_answers([t for t in self.targets if t.injected is not None])
        except BaseException:
            self.cancel.set()
            raise
        finally:
            pool.shutdown(wait=True)
        attached = [t for t in self.targets if t.attached]
        if not attached and self.boot.follow_s is None:  # a follow waits for ranks to come (attach_more)
            raise AttachRefused(self._refusal())
        return attached

    def attach_more(self) -> list[Target]:
        """Processes started below the pids since (a rank started later, one its launcher
        restarted), and those that had no process group yet when last tried: injected as
        `start` does; the newly attached. Never raises for one that cannot be attached."""
        answered = [t for t in self.targets if t.waiting and self._answered(t)]
        for target in answered:
            target.waiting = False
        tried = {(t.pid, t.start): t for t in self.targets}
        uid = self.targets[0].info.uid if self.targets else None
        fresh, retried = [], []
        for pid in _tree(self.pids):
            start = process_start(pid)
            old = tried.get((pid, start))
            if old is not None and not retry_due(old, procs.age_s(pid)):
                continue  # known: nothing of it is read again (a rank's maps are megabytes)
            age = procs.age_s(pid)
            if age < YOUNG_S:
                continue  # starting (importing torch, meeting its peers): not stopped by gdb now, next scan
            info = _inspect_quietly(pid)
            if info is None or not (info.is_python and info.torch):
                continue  # (not yet: torch may still be loading; looked at again next time)
            if old is None:
                fresh.append(Target(info, start, refusal=_other_user(info, uid), tried_at_s=age))
            else:  # torch was imported, its group not made yet
                retried.append(old)
                fresh.append(Target(info, start, tried_at_s=age))
        if not fresh:
            return [t for t in answered if t.attached]
        for old in retried:  # its agent's answer was a refusal: the next answer is the new agent's
            with contextlib.suppress(OSError):
                protocol.status_file(self.run_dir, old.pid).unlink()
        self.targets = [t for t in self.targets if t not in retried]
        self.targets = self.targets + fresh
        for target in fresh:
            if target.refusal is None:
                self._inject(target)
        self._await_answers([t for t in fresh if t.injected is not None])
        return [t for t in answered + fresh if t.attached]

    def _make_agent_dir(self) -> None:
        """The agents' one directory, made here (never one that was there) and handed to the
        targets' user; the run directory made passable for that user, and only that
        (docs/security.md). A user who cannot reach it, or hicache's code, is refused here."""
        uids = sorted({t.info.uid for t in self.targets})
        if len(uids) > 1:
            raise AttachRefused(
                f"the processes belong to different users (uids {', '.join(map(str, uids))}): "
                "attach to one user's processes at a time"
            )
        who = self.targets[0].info
        try:
            make_agent_dir(self.run_dir, who.uid)
        except OSError as exc:
            raise AttachRefused(f"cannot make the agents' directory in {self.run_dir}: {exc.strerror or exc}") from None
        if (blocked := procs.can_reach(protocol.agent_dir(self.run_dir), who)) is not None:
            raise AttachRefused(
                f"cannot attach to {who.label}: it runs as uid {who.uid}, and {blocked} to the run directory; "
                "choose a --run-dir that user can pass through (e.g. a new directory under /tmp)"
            )
        if (unreadable := out_of_reach(who)) is not None:
            raise AttachRefused(
                f"cannot attach to {who.label}: it runs as uid {who.uid}, and hicache's own code, which it must "
                f"import, is out of its reach ({unreadable}); install hicache where that user can read it"
            )

    def _inject(self, target: Target) -> None:
        try:
            target.injected = inject.inject(target.info, self.boot, start=target.start, cancel=self.cancel)
        except AttachRefused as exc:
            target.refusal = str(exc)

    def _await_answers(self, targets: list[Target]) -> None:
        """Until each injected process has answered, or `answer_s`. A launcher whose ranks
        below it have answered (torch.multiprocessing's parent, its main thread waiting in
        C for them to end, never back in Python) is waited for LAUNCHER_GRACE_S more, not
        the whole answer time."""
        deadline = time.monotonic() + self.answer_s
        waiting = list(targets)
        below = {t.pid: set(procs.descendants(t.pid)) for t in waiting}  # read once: /proc's whole walk
        launchers_since: float | None = None
        while waiting and time.monotonic() < deadline:
            waiting = [t for t in waiting if not self._answered(t)]
            if waiting and all(self._ranks_below(below[t.pid]) for t in waiting):
                launchers_since = launchers_since or time.monotonic()
                if time.monotonic() - launchers_since >= LAUNCHER_GRACE_S:
                    break
            else:
                launchers_since = None
            time.sleep(POLL_S)
        for target in waiting:
            silence = self._silence(self._ranks_below(below[target.pid]))
            if self.boot.follow_s is not None and target.alive():  # followed: asked again at each scan
                target.waiting = True
                target.refusal = f"{target.info.label} has not answered yet: {silence}; attached when it does"
                continue
            waited = min(time.monotonic() - (deadline - self.answer_s), self.answer_s)
            target.refusal = f"{target.info.label} did not answer within {waited:.0f} s: {silence}"
            with contextlib.suppress(OSError):  # (a full disk: it then finds hicache gone, and refuses)
                touch_run_file(protocol.cancel_file(self.run_dir, target.pid))  # if it ever runs, it refuses

    def _ranks_below(self, below: set[int]) -> list[Target]:
        """The attached processes among `below` (a process's descendants) when each of those
        hicache injected has answered; none: that process is no launcher whose ranks hicache has."""
        tried = [t for t in self.targets if t.pid in below and t.injected is not None]
        if not tried or any(not t.attached and t.refusal is None for t in tried):
            return []
        return [t for t in tried if t.attached]

    def _answered(self, target: Target) -> bool:
        """Whether an injected process is done with: its agent answered (or left what hicache
        will not read), or it exited first. The text it ran is removed once it has answered."""
        if self._status(target) is not None or target.unreadable is not None:
            with contextlib.suppress(OSError):
                inject.remote_script(self.run_dir, target.pid).unlink()
            return True
        if not target.alive():
            target.refusal = f"{target.info.label} exited before it answered"
            return True
        return False

    def _silence(self, ranks: list[Target]) -> str:
        """Why an injected process has not answered: its agent cannot write where it answers,
        or (most often) its main thread has not come back to Python to run the text - a
        launcher waiting for its ranks, or one blocked in C code."""
        found = os.stat(protocol.agent_dir(self.run_dir))
        if not found.st_mode & stat.S_IWUSR:
            return (f"the agents' directory was made unwritable ({stat.S_IMODE(found.st_mode):04o}) by its owner "
                    "after hicache made it, so its agent could not answer")  # fmt: skip
        if ranks:
            pids = ", ".join(str(t.pid) for t in ranks)
            return (f"a launcher whose main thread waits in C code for its ranks below it (pid {pids}, attached), "
                    "never back in Python to run the injected code")  # fmt: skip
        return "its main thread has not returned to Python to run the injected code (blocked in C code?)"

    def _refusal(self) -> str:
        """One line: the refusal of the process named on the command line first."""
        named = [t for t in self.targets if t.pid in self.pids] or self.targets
        first = named[0]
        why = first.refusal or "it did not answer"
        if not why.startswith(("cannot attach", "pid ", "no process")):
            why = f"cannot attach to {first.info.label}: {why}"
        others = len(self.targets) - 1
        return why + (f" (nor to any of {others} other Python process(es) below it)" if others else "")

    # -- while attached -----------------------------------------------------------------

    def status(self, pid: int) -> AgentStatus | None:
        """What `pid`'s agent last said of itself (None: nothing yet, or nothing hicache would read)."""
        target = next((t for t in self.targets if t.pid == pid), None)
        return self._status(target) if target is not None else None

    def _status(self, target: Target) -> AgentStatus | None:
        """The agent's status file, read as another user's file. One that is not what an agent
        writes (a link, a FIFO, another user's, malformed) is never read or waited on: the
        target is refused, naming it."""
        if target.unreadable is not None:
            return None
        data = self._read(target, protocol.status_file(self.run_dir, target.pid))
        if data is None:
            return None
        try:
            status = AgentStatus.from_dict(data)
        except ShapeError as exc:
            self._refuse(target, f"its agent's status file is not what an agent writes ({exc})")
            return None
        target.status = status
        target.attached = target.attached or status.state == protocol.ATTACHED
        target.refusal = None if target.attached else status.reason
        return status

    def _read(self, target: Target, path: Path) -> dict[str, Any] | None:
        try:
            return protocol.read_json(path, owners={target.info.uid})
        except OSError as exc:
            self._refuse(target, f"hicache did not read {path.name} in the agents' directory: {exc.strerror or exc}")
            return None

    def _refuse(self, target: Target, why: str) -> None:
        """What an agent left is not what an agent writes: said, and never looked at again."""
        target.unreadable = target.refusal = f"{target.info.label}: {why}"

    def census(self, when: str = "start", timeout_s: float = 60.0) -> dict[int, Census]:
        """Each attached process's census (waiting for it to be written)."""
        out: dict[int, Census] = {}
        deadline = time.monotonic() + timeout_s
        pending = [t for t in self.targets if t.attached]
        while pending and time.monotonic() < deadline:
            for target in list(pending):
                taken = self.read_census(target, when)
                if taken is not None:
                    out[target.pid] = taken
                    pending.remove(target)
                elif not target.alive() or target.unreadable is not None:
                    pending.remove(target)
            time.sleep(POLL_S)
        return out

    def read_census(self, target: Target, when: str) -> Census | None:
        if target.unreadable is not None:
            return None
        data = self._read(target, protocol.census_file(self.run_dir, target.pid, when))
        if data is None:
            return None
        try:
            return Census.from_dict(data)
        except ShapeError as exc:
            self._refuse(target, f"its agent's census is not what an agent writes ({exc})")
            return None

    def _says_attached(self, target: Target) -> bool:
        self._status(target)
        return target.attached

    def running(self) -> list[Target]:
        """The attached targets still running (the supervisor's `exited` is: none left)."""
        return [t for t in self.targets if t.attached and t.alive()]

    def census_end(self, timeout_s: float = 60.0) -> dict[int, Census]:
        """The census each agent took as it detached (after `detach()`)."""
        return self.census("end", timeout_s)

    # -- detach ---------------------------------------------------------------------------

    def detach(self, timeout_s: float = 60.0) -> dict[int, AgentStatus]:
        """Ask every agent to detach (the stop file) and wait for each to say it has."""
        try:
            touch_run_file(self.run_dir / protocol.STOP_FILE)
        except OSError:  # a full disk: each agent detaches on its own once hicache has exited (its lifeline)
            return {}
        deadline = time.monotonic() + timeout_s
        out: dict[int, AgentStatus] = {}
        # the attached, and any that attached while start() was cut short (Ctrl-C); one that has
        # not run the text yet never will attach: it finds the stop file and refuses
        pending = [t for t in self.targets if t.attached or self._says_attached(t)]
        for target in self.targets:
            if target.waiting and not target.attached:  # reported as not having run the text
                target.waiting, target.refusal = False, None
        while pending and time.monotonic() < deadline:
            for target in list(pending):
                status = self._status(target)
                if status is not None and status.state in (protocol.DETACHED, protocol.FAILED):
                    out[target.pid] = status
                    pending.remove(target)
                elif not target.alive() or target.unreadable is not None:
                    pending.remove(target)
            time.sleep(POLL_S)
        return out


def make_agent_dir(run_dir: Path, uid: int) -> Path:
    """`run_dir`/agent made exclusively (FileExistsError when something is there), 0700 and
    owned by `uid`; when that is another user, the run directory (hicache's own) gets the
    search bit for others, so that user can pass through it to its directory and nowhere
    else: it can neither list nor write the run directory, whose files are 0600."""
    path = protocol.agent_dir(run_dir)
    os.mkdir(path, DIR_MODE)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if uid != os.geteuid():
            os.fchown(fd, uid, -1)
        os.fchmod(fd, DIR_MODE)
    finally:
        os.close(fd)
    if uid != os.geteuid():
        found = os.stat(run_dir)
        if found.st_uid == os.geteuid():
            os.chmod(run_dir, stat.S_IMODE(found.st_mode) | 0o011)
    return path


def _other_user(info: ProcessInfo, uid: int | None) -> str | None:
    if uid is None or info.uid == uid:
        return None
    return f"{info.label} runs as uid {info.uid}, not {uid} like the processes attached: not attached"


def _tree(pids: list[int]) -> list[int]:
    """The pids and every process below them now, once each."""
    return list(dict.fromkeys(p for pid in pids for p in [pid, *procs.descendants(pid)]))


def resolve(pids: list[int]) -> list[ProcessInfo]:
    """The processes to inject: each PID and its descendants that are Python with torch.
    AttachRefused, naming which test failed, when a PID has none."""
    found: dict[int, ProcessInfo] = {}
    for pid in pids:
        info = procs.inspect(pid)
        tree = [info] + [_inspect_quietly(child) for child in procs.descendants(pid)]
        candidates = [p for p in tree if p is not None and p.is_python and p.torch]
        if not candidates:
            raise AttachRefused(_why_none(info, [p for p in tree[1:] if p is not None]))
        found.update((p.pid, p) for p in candidates)
    return list(found.values())


def check(pids: list[int]) -> list[ProcessInfo]:
    """What can be said before anything is touched: the processes exist, are Python with
    torch, a debugger is there and the kernel lets this process trace at least one of them.
    The candidates, or AttachRefused (one line) naming the first reason."""
    candidates = resolve(pids)
    refusals = []
    for info in candidates:
        try:
            why = procs.ptrace_refusal(info)
            inject.choose(info)
        except AttachRefused as exc:
            why = str(exc)
        if why is None:
            return candidates
        refusals.append(why)
    raise AttachRefused(refusals[0])


def _inspect_quietly(pid: int) -> ProcessInfo | None:
    try:
        return procs.inspect(pid)
    except AttachRefused:  # gone meanwhile, or not readable
        return None


def _why_none(info: ProcessInfo, below: list[ProcessInfo]) -> str:
    """Why neither `info` nor anything below it can be attached, naming which test failed."""
    pythons = [p for p in below if p.is_python]
    if not info.is_python and not pythons:
        below_text = f" and none of the {len(below)} process(es) below it is" if below else ""
        return f"{info.label} is not a Python process{below_text}"
    return f"{info.label}: torch is not imported" + (
        f" (nor in the {len(pythons)} Python process(es) below it)" if pythons else ""
    )
