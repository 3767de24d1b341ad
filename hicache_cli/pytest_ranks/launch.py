"""In pytest: start a marked test's rank processes, watch them, and stop every one of them.

Each rank runs in a session of its own (a terminal's Ctrl-C reaches pytest, which stops the
ranks in order), gets SIGTERM if pytest dies (the parent-death signal: from pytest for a
spawned rank, from the fork server, which gets it from pytest, for a forked one), and
watches pytest's pid itself. The test is over when every rank has reported; or, once the test is known to fail
(a rank raised or died, or held more live Works than allowed), FAIL_GRACE_S later; or at the
timeout. Ranks still running then have their stacks dumped (SIGUSR1) and are stopped:
SIGTERM to their process group, SIGKILL after a grace, their descendants included. Whatever
ends the wait (an exception, KeyboardInterrupt), nothing is left running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil

from hicache_cli.lifecycle import parent_death_signal
from hicache_cli.pytest_ranks.forkserver import ForkServer, ForkServerError
from hicache_cli.pytest_ranks.protocol import (
    RELEASE,
    RUNNER_MODULE,
    Outcome,
    RankRequest,
    log_file,
    stack_file,
    started_file,
)
from hicache_cli.pytest_ranks.results import LOG_TAIL_LINES, RankEnd, RankOutcome
from hicache_cli.series import RunFollower, RunSeries
from hicache_cli.tracer import protocol as trace_protocol

POLL_S = 0.05
STARTUP_LIMIT_S = 300.0  # spawn to the test body (interpreter, torch import, rendezvous): the timeout is the body's
FAIL_GRACE_S = 1.0  # once the test has failed: time for the other ranks to finish on their own
STACK_WAIT_S = 1.5  # for the stack dumps to be written
EXIT_WAIT_S = 3.0  # after the release, for ranks to leave by themselves
TERM_GRACE_S = 3.0  # after SIGTERM, before SIGKILL
DESCENDANTS_EVERY_S = 0.5
STATUS = {"passed": RankOutcome.PASSED, "failed": RankOutcome.FAILED, "skipped": RankOutcome.SKIPPED}


@dataclass(frozen=True)
class Launched:
    ends: tuple[RankEnd, ...]
    followed: RunSeries  # every rank's samples as the launcher read them (bounded, exact totals)
    wall_s: float
    spawned_wall: float  # time.time() when the first rank was started
    forked: int = 0  # ranks forked from the fork server (the others were spawned)


class RankProcess(Protocol):
    """A Popen (a spawned rank) or a ForkedRank: pid, poll() and returncode."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...


def common_environment(base: dict[str, str]) -> dict[str, str]:
    """What every rank (and the fork server) runs with: one intra-op thread each (as torchrun
    sets), gloo on loopback, and no outer `hicache trace` (a test's tracer is its own)."""
    env = {k: v for k, v in base.items() if not k.startswith("HICACHE_TRACE_")}
    boot = str(trace_protocol.BOOT_DIR)
    if "PYTHONPATH" in env:
        kept = [p for p in env["PYTHONPATH"].split(os.pathsep) if p and os.path.abspath(p) != boot]
        if kept:
            env["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            del env["PYTHONPATH"]
    env.setdefault("OMP_NUM_THREADS", "1")
    if sys.platform.startswith("linux"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return env


def rank_environment(base: dict[str, str], rank: int, world_size: int) -> dict[str, str]:
    """A rank's environment: the common one and torchrun's variables."""
    env = common_environment(base)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        GROUP_RANK="0",
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
    )
    return env


class Ranks:
    """The rank processes and what is known of their descendants (psutil handles taken when
    first seen, so a reused pid is never signalled)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.procs: list[RankProcess] = []
        self.handles: dict[int, psutil.Process] = {}
        self.forked = 0
        self._descendants_at = 0.0

    def start(self, request: RankRequest, server: ForkServer | None) -> None:
        """Fork each rank from the server when there is one (spawn a rank it fails to fork)."""
        preexec = parent_death_signal()
        for rank in range(request.world_size):
            env = rank_environment(dict(os.environ), rank, request.world_size)
            proc: RankProcess | None = None
            if server is not None:
                try:
                    proc = server.fork(self.run_dir, rank, env, os.getcwd())
                    self.forked += 1
                except ForkServerError:
                    server = None
            if proc is None:
                proc = _spawn(self.run_dir, rank, env, preexec)
            self.procs.append(proc)
            with contextlib.suppress(psutil.Error):
                self.handles[proc.pid] = psutil.Process(proc.pid)

    def note_descendants(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now < self._descendants_at:
            return
        self._descendants_at = now + DESCENDANTS_EVERY_S
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(psutil.Error):
                    for child in self.handles[proc.pid].children(recursive=True):
                        self.handles.setdefault(child.pid, child)

    def running(self) -> list[psutil.Process]:
        alive = []
        for handle in self.handles.values():
            with contextlib.suppress(psutil.Error):
                if handle.is_running() and handle.status() != psutil.STATUS_ZOMBIE:
                    alive.append(handle)
        return alive

    def dump_stacks(self, ranks: list[int]) -> dict[int, str]:
        """SIGUSR1 to each rank (its faulthandler writes every thread's stack), then read them."""
        for rank in ranks:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.procs[rank].pid, signal.SIGUSR1)
        deadline = time.monotonic() + STACK_WAIT_S
        sizes: dict[int, int] = {}
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = {r: _size(stack_file(self.run_dir, r)) for r in ranks}
            if all(now[r] > 0 and now[r] == sizes.get(r) for r in ranks):
                break
            sizes = now
        return {r: _read(stack_file(self.run_dir, r)) for r in ranks}

    def stop(self) -> None:
        """End the ranks that have not reported (SIGTERM, then SIGKILL) before releasing the
        others, so that no body still running sees a peer leave; then release the rest, and
        end whatever is left of them and their descendants."""
        self.note_descendants(force=True)
        unreported = [i for i, p in enumerate(self.procs) if p.poll() is None and not Outcome.read(self.run_dir, i)]
        self._end(unreported)
        with contextlib.suppress(OSError):
            (self.run_dir / RELEASE).touch()
        _wait_until(lambda: all(p.poll() is not None for p in self.procs), EXIT_WAIT_S)
        self._end(list(range(len(self.procs))), descendants=True)

    def _end(self, ranks: list[int], descendants: bool = False) -> None:
        def ended() -> bool:
            return all(self.procs[r].poll() is not None for r in ranks) and not (descendants and self.running())

        for signo, grace in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, 2.0)):
            if ended():
                return
            for rank in ranks:
                if self.procs[rank].poll() is None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(self.procs[rank].pid, signo)  # its own session: its process group
            if descendants:
                for handle in self.running():
                    with contextlib.suppress(psutil.Error):
                        handle.send_signal(signo)
            _wait_until(ended, grace)


def _spawn(run_dir: Path, rank: int, env: dict[str, str], preexec: Callable[[], None] | None) -> RankProcess:
    with log_file(run_dir, rank).open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", RUNNER_MODULE, str(run_dir), str(rank)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a terminal's Ctrl-C reaches pytest only, which stops the ranks
            preexec_fn=preexec,
        )


def _wait_until(done: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def run_ranks(
    request: RankRequest,
    run_dir: Path,
    failed_from_samples: Callable[[RunSeries], bool],
    server: ForkServer | None = None,
    unwaited_sends_fail: bool = True,
) -> Launched:
    """Run the test body on every rank; return how each ended and every rank's samples. With
    `unwaited_sends_fail`, a body that returns with sends it never waited fails the test at
    once (its peer may wait for them until the timeout)."""
    spawned_wall, started = time.time(), time.monotonic()
    ranks = Ranks(run_dir)
    follower = RunFollower(run_dir)
    try:
        ranks.start(request, server)
        ends = _supervise(request, run_dir, ranks, follower, failed_from_samples, started, unwaited_sends_fail)
    finally:
        ranks.stop()
    follower.poll()
    return Launched(tuple(ends), follower.run, time.monotonic() - started, spawned_wall, ranks.forked)


def _supervise(
    request: RankRequest,
    run_dir: Path,
    ranks: Ranks,
    follower: RunFollower,
    failed_from_samples: Callable[[RunSeries], bool],
    started: float,
    unwaited_sends_fail: bool = True,
) -> list[RankEnd]:
    ends: dict[int, RankEnd] = {}
    pending = set(range(request.world_size))
    failed_at: float | None = None
    deadline = started + STARTUP_LIMIT_S
    body_started = False
    cut_short = RankOutcome.TIMED_OUT
    while pending:
        for rank in sorted(pending):
            end = _ended(run_dir, rank, ranks.procs[rank])
            if end is not None:
                ends[rank] = end
                pending.discard(rank)
        if not pending:
            break
        ranks.note_descendants()
        now = time.monotonic()
        if not body_started and any(started_file(run_dir, r).exists() for r in range(request.world_size)):
            body_started, deadline = True, now + request.timeout_s
        if failed_at is None:
            follower.poll()
            unwaited = unwaited_sends_fail and any(e.reported and e.reported.unwaited_sends for e in ends.values())
            if (
                unwaited
                or any(e.outcome in (RankOutcome.FAILED, RankOutcome.CRASHED) for e in ends.values())
                or failed_from_samples(follower.run)
            ):
                failed_at = now
        if failed_at is not None and now - failed_at >= FAIL_GRACE_S:
            cut_short = RankOutcome.STOPPED
            break
        if now >= deadline:
            break
        time.sleep(POLL_S)
    if pending:
        stacks = ranks.dump_stacks(sorted(pending))
        for rank in sorted(pending):
            in_body = started_file(run_dir, rank).exists()
            ends[rank] = RankEnd(rank, ranks.procs[rank].pid, cut_short, stack=stacks.get(rank) or None,
                                 in_body=in_body)  # fmt: skip
    return [ends[r] for r in sorted(ends)]


def _ended(run_dir: Path, rank: int, proc: RankProcess) -> RankEnd | None:
    """The rank's end once it has reported its outcome or its process has ended."""
    reported = Outcome.read(run_dir, rank)
    if reported is None and proc.poll() is not None:
        reported = Outcome.read(run_dir, rank)  # it may have written one just before leaving
        if reported is None:
            return RankEnd(rank, proc.pid, RankOutcome.CRASHED, exit_code=proc.returncode,
                           log_tail=_tail(log_file(run_dir, rank)))  # fmt: skip
    if reported is None:
        return None
    return RankEnd(rank, proc.pid, STATUS.get(reported.status, RankOutcome.FAILED), reported=reported)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str | None:
    text = _read(path).rstrip()
    return "\n".join(text.splitlines()[-lines:]) or None
