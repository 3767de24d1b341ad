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

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import hicache_cli
from hicache_cli.attach import inject, procs, protocol
from hicache_cli.attach.procs import ProcessInfo
from hicache_cli.attach.protocol import AgentStatus, BootArgs, Census
from hicache_cli.errors import AttachRefused
from hicache_cli.lifecycle import owner_token, process_start

ROOT = str(Path(hicache_cli.__file__).resolve().parent.parent)
ANSWER_S = 30.0  # how long an injected process has to reach a safe point and answer
POLL_S = 0.05


@dataclass
class Target:
    """One process hicache tried to attach to."""

    info: ProcessInfo
    start: str | None  # its start time (with the pid, names it even after pid reuse)
    status: AgentStatus | None = None
    injected: inject.Injected | None = None
    refusal: str | None = None  # why it is not attached (ours or the agent's), in words
    attached: bool = False  # its agent said so (it stays True once detached: a census was taken)

    @property
    def pid(self) -> int:
        return self.info.pid

    def alive(self) -> bool:
        return self.start is not None and process_start(self.pid) == self.start


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
    ) -> None:
        self.pids = pids
        self.run_dir = run_dir
        self.boot = BootArgs(str(run_dir.resolve()), ROOT, owner or owner_token(), hz, census, tracer)
        self.answer_s = answer_s
        self.targets: list[Target] = []

    # -- start: resolve, inject, wait for answers -----------------------------------------

    def start(self) -> list[Target]:
        """Inject into every candidate and wait for each answer; the attached targets.
        AttachRefused (one line, exit 2) when none could be attached."""
        candidates = resolve(self.pids)
        self.targets = [Target(info, process_start(info.pid)) for info in candidates]
        with ThreadPoolExecutor(max_workers=min(8, len(self.targets))) as pool:
            list(pool.map(self._inject, self.targets))
        self._await_answers([t for t in self.targets if t.injected is not None])
        attached = [t for t in self.targets if t.attached]
        if not attached:
            raise AttachRefused(self._refusal())
        return attached

    def _inject(self, target: Target) -> None:
        try:
            target.injected = inject.inject(target.info, self.boot)
        except AttachRefused as exc:
            target.refusal = str(exc)

    def _await_answers(self, targets: list[Target]) -> None:
        deadline = time.monotonic() + self.answer_s
        waiting = list(targets)
        while waiting and time.monotonic() < deadline:
            for target in list(waiting):
                status = self.status(target.pid)
                if status is not None:
                    target.status = status
                    target.attached = status.state == protocol.ATTACHED
                    target.refusal = None if target.attached else status.reason
                    waiting.remove(target)
                    inject.remote_script(self.run_dir, target.pid).unlink(missing_ok=True)
                elif not target.alive():
                    target.refusal = f"{target.info.label} exited before it answered"
                    waiting.remove(target)
            time.sleep(POLL_S)
        for target in waiting:
            target.refusal = (
                f"{target.info.label} did not run the injected code within {self.answer_s:.0f} s: its main "
                "thread has not returned to Python (blocked in C code?)"
            )
            protocol.cancel_file(self.run_dir, target.pid).touch()  # if it ever runs, it refuses

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
        data = protocol.read_json(protocol.status_file(self.run_dir, pid))
        return AgentStatus.from_dict(data) if data else None

    def census(self, when: str = "start", timeout_s: float = 60.0) -> dict[int, Census]:
        """Each attached process's census (waiting for it to be written)."""
        out: dict[int, Census] = {}
        deadline = time.monotonic() + timeout_s
        pending = [t for t in self.targets if t.attached]
        while pending and time.monotonic() < deadline:
            for target in list(pending):
                data = protocol.read_json(protocol.census_file(self.run_dir, target.pid, when))
                if data is not None:
                    out[target.pid] = Census.from_dict(data)
                    pending.remove(target)
                elif not target.alive():
                    pending.remove(target)
            time.sleep(POLL_S)
        return out

    def running(self) -> list[Target]:
        """The attached targets still running (the supervisor's `exited` is: none left)."""
        return [t for t in self.targets if t.attached and t.alive()]

    def _says_attached(self, target: Target) -> bool:
        status = self.status(target.pid)
        target.attached = target.attached or (status is not None and status.state == protocol.ATTACHED)
        return target.attached

    def census_end(self, timeout_s: float = 60.0) -> dict[int, Census]:
        """The census each agent took as it detached (after `detach()`)."""
        return self.census("end", timeout_s)

    # -- detach ---------------------------------------------------------------------------

    def detach(self, timeout_s: float = 60.0) -> dict[int, AgentStatus]:
        """Ask every agent to detach (the stop file) and wait for each to say it has."""
        (self.run_dir / protocol.STOP_FILE).touch()
        deadline = time.monotonic() + timeout_s
        out: dict[int, AgentStatus] = {}
        # the attached, and any that attached while start() was cut short (Ctrl-C); one that has
        # not run the text yet never will attach: it finds the stop file and refuses
        pending = [t for t in self.targets if t.attached or self._says_attached(t)]
        while pending and time.monotonic() < deadline:
            for target in list(pending):
                status = self.status(target.pid)
                if status is not None and status.state in (protocol.DETACHED, protocol.FAILED):
                    out[target.pid] = target.status = status
                    pending.remove(target)
                elif not target.alive():
                    pending.remove(target)
            time.sleep(POLL_S)
        return out


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
