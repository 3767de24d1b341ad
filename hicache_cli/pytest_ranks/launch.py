"""In pytest: start a marked test's rank processes, watch them, and stop every one of them,
a strategy of the supervisor (launch/supervisor.follow).

Each rank runs in a session of its own (a terminal's Ctrl-C reaches pytest, which stops the
ranks in order), gets SIGTERM if pytest dies (the parent-death signal: from pytest for a
spawned rank, from the fork server, which gets it from pytest, for a forked one), and
watches pytest's pid itself. The test is over when every rank has reported; or, once the test
is known to fail (a rank raised or died, held more live Works than allowed, or returned with
sends it never waited: its peer may wait for them forever), FAIL_GRACE_S later; or at the
timeout. Ranks still running then have their stacks dumped (hicache_cli.stacks) and are stopped:
SIGTERM to their process group, SIGKILL after a grace, their descendants included (a daemon
a rank double-forked is reparented to pytest, or to the fork server, and found by the tree's
token). Whatever ends the wait (an exception, KeyboardInterrupt), nothing is left
running.
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

from hicache_cli import stacks
from hicache_cli.files import run_file
from hicache_cli.launch.supervisor import KILL_WAIT_S, ProcessTree, Stop, follow
from hicache_cli.lifecycle import parent_death_signal
from hicache_cli.outcome import RunOutcome
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
from hicache_cli.rundir import read_run_text, touch_run_file
from hicache_cli.sample import Sample
from hicache_cli.series import RunFollower, RunSeries
from hicache_cli.tracer import protocol as trace_protocol

POLL_S = 0.05
STARTUP_LIMIT_S = 300.0  # spawn to the test body (interpreter, torch import, rendezvous): the timeout is the body's
FAIL_GRACE_S = 1.0  # once the test has failed: time for the other ranks to finish on their own
EXIT_WAIT_S = 3.0  # after the release, for ranks to leave by themselves
TERM_GRACE_S = 3.0  # after SIGTERM, before SIGKILL
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


class TestRanks:
    """The supervisor's strategy for a marked test's ranks: forked from the session's fork
    server (spawned when there is none), each in a session of its own; the test is over when
    every rank has reported or ended, once it is known to fail and FAIL_GRACE_S has passed,
    or at the timeout."""

    def __init__(
        self,
        request: RankRequest,
        run_dir: Path,
        failed_from_samples: Callable[[RunSeries], bool],
        server: ForkServer | None,
        unwaited_sends_fail: bool = True,
    ) -> None:
        self.request, self.run_dir = request, run_dir
        self.failed_from_samples = failed_from_samples
        self.unwaited_sends_fail = unwaited_sends_fail  # a body that returned with sends never waited fails
        self.server = server
        self.follower = RunFollower(run_dir)
        self.tree = ProcessTree()
        if server is not None:  # forked ranks' orphans go to the server, a subreaper, with its token
            self.tree.adopters[server.pid] = server.token
        self.watchdog = None
        self.procs: list[RankProcess] = []
        self.forked = 0
        self.ends: dict[int, RankEnd] = {}
        self.pending = set(range(request.world_size))
        self.started = time.monotonic()
        self.deadline = self.started + STARTUP_LIMIT_S
        self.body_started = False
        self.failed_at: float | None = None
        self.cut_short = RankOutcome.TIMED_OUT
        self.spawned_wall = time.time()

    def pids_of(self, samples: dict[int, list[Sample]]) -> list[int]:
        return [s[-1].pid for s in samples.values() if s]

    def start(self) -> None:
        """Fork each rank from the server when there is one (spawn a rank it fails to fork)."""
        preexec = parent_death_signal()
        self.spawned_wall, self.started = time.time(), time.monotonic()
        self.deadline = self.started + STARTUP_LIMIT_S
        server = self.server
        for rank in range(self.request.world_size):
            env = self.tree.environment(rank_environment(dict(os.environ), rank, self.request.world_size))
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
            self.tree.add_root(proc.pid)

    def exited(self) -> bool:
        for rank in sorted(self.pending):
            end = _ended(self.run_dir, rank, self.procs[rank]) if rank < len(self.procs) else None
            if end is not None:
                self.ends[rank] = end
                self.pending.discard(rank)
        return bool(self.procs) and not self.pending

    def check(self, samples: dict[int, list[Sample]], now: float) -> Stop | None:
        request = self.request
        if not self.body_started and any(started_file(self.run_dir, r).exists() for r in range(request.world_size)):
            self.body_started, self.deadline = True, now + request.timeout_s
        if self.failed_at is None and (
            any(e.outcome in (RankOutcome.FAILED, RankOutcome.CRASHED) for e in self.ends.values())
            or self.failed_from_samples(self.follower.run)
            or (self.unwaited_sends_fail and any(e.reported and e.reported.unwaited_sends for e in self.ends.values()))
        ):
            self.failed_at = now
        if self.failed_at is not None and now - self.failed_at >= FAIL_GRACE_S:
            self.cut_short = RankOutcome.STOPPED
            return Stop("the test failed")
        if now >= self.deadline:
            return Stop("the timeout")
        return None

    def may_stop_early(self, samples: dict[int, list[Sample]]) -> bool:
        return False

    def stop_early(self, samples: dict[int, list[Sample]], reason: str, now: float) -> Stop | None:
        return None

    def stop(self, stop: Stop | None) -> None:
        """The ranks still running: stacks dumped (when the test was cut short), then ended
        (SIGTERM, then SIGKILL) before the others are released, so that no body still
        running sees a peer leave; then the rest released, and whatever is left of every
        rank and its descendants ended."""
        if stop is not None and not stop.interrupted and self.pending:
            stacks = self.dump_stacks(sorted(self.pending))
            for rank in sorted(self.pending):
                in_body = started_file(self.run_dir, rank).exists()
                self.ends[rank] = RankEnd(rank, self.procs[rank].pid, self.cut_short, stack=stacks.get(rank) or None,
                                          in_body=in_body)  # fmt: skip
        self.tree.refresh(force=True)
        procs = self.procs
        unreported = [p for i, p in enumerate(procs) if p.poll() is None and not Outcome.read(self.run_dir, i)]
        self._end(unreported)
        with contextlib.suppress(OSError):
            touch_run_file(self.run_dir / RELEASE)
        self.tree.wait(EXIT_WAIT_S, lambda: all(p.poll() is not None for p in procs))
        self.tree.sweep()  # a daemon a rank left behind, wherever it went
        self.tree.end([(signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, KILL_WAIT_S)], groups=False)

    def _end(self, procs: list[RankProcess]) -> None:
        """SIGTERM then SIGKILL to each rank's process group (its own session)."""

        def ended() -> bool:
            return all(p.poll() is not None for p in procs)

        for signo, grace in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, KILL_WAIT_S)):
            if ended():
                return
            for proc in procs:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signo)
            self.tree.wait(grace, ended)

    def dump_stacks(self, ranks: list[int]) -> dict[int, str]:
        """Ask each rank for every thread's stack (hicache_cli.stacks), then read them."""
        stacks.request({self.procs[r].pid: stack_file(self.run_dir, r) for r in ranks})
        return {r: _read(stack_file(self.run_dir, r)) for r in ranks}

    def outcome(self, stop: Stop | None) -> RunOutcome:
        return RunOutcome(stopped=stop.reason if stop is not None else None)


def _spawn(run_dir: Path, rank: int, env: dict[str, str], preexec: Callable[[], None] | None) -> RankProcess:
    with run_file(log_file(run_dir, rank), "truncate", binary=True) as log:
        return subprocess.Popen(
            [sys.executable, "-m", RUNNER_MODULE, str(run_dir), str(rank)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a terminal's Ctrl-C reaches pytest only, which stops the ranks
            preexec_fn=preexec,
        )


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
    ranks = TestRanks(request, run_dir, failed_from_samples, server, unwaited_sends_fail)
    outcome = follow(ranks, poll_s=POLL_S, reraise_interrupt=True)
    stacks.remove_asks(run_dir)
    ends = tuple(ranks.ends[r] for r in sorted(ranks.ends))
    return Launched(ends, ranks.follower.run, outcome.wall_s, ranks.spawned_wall, ranks.forked)


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


def _read(path: Path) -> str:
    try:
        return read_run_text(path)
    except OSError:
        return ""


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str | None:
    text = _read(path).rstrip()
    return "\n".join(text.splitlines()[-lines:]) or None
