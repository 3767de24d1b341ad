"""One supervisor for every process tree hicache starts: torchrun and its ranks (`stress`), a
traced program and everything below it (`trace`), a marked test's ranks (the pytest plugin).

`ProcessTree` holds the processes: a psutil handle for each, taken the first time it is seen
(so a pid reused later is never signalled), found as descendants of what was started, by the
pid in their samples, and as orphans. Orphans are not lost: while a tree is followed, the
process following it is a child subreaper (Linux, prctl PR_SET_CHILD_SUBREAPER), so a process
whose parent left (a daemon that double-forks at once) is reparented here rather than to init;
every process started carries the tree's token in its environment (protocol.TREE_ENV), which
tells the run's orphans from anyone else's. `end()` climbs an escalation ladder (a signal, a
grace; the next signal) until nothing of the tree runs.

`follow()` is the one loop: it starts a `Strategy`, feeds the view, asks the strategy and the
watchdog whether to stop, honours early stopping and stop signals, and whatever happens ends
the tree and returns how the run ended (`RunOutcome`). The strategies differ only in how they
start, when they have ended by themselves and how they stop, in the spirit of torch elastic's
PContext (`_start`, `_poll`, `_close` around one shared `wait`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil

from hicache_cli import stacks
from hicache_cli.lifecycle import STOPS, child_subreaper
from hicache_cli.outcome import RunOutcome
from hicache_cli.protocol import TREE_ENV, stacks_file
from hicache_cli.sample import Sample
from hicache_cli.series import RunFollower
from hicache_cli.watchdog import Stall, find_stalls

View = Callable[[dict[int, list[Sample]], float], None]
EarlyStop = Callable[[dict[int, list[Sample]]], str | None]
Ladder = Sequence[tuple[int | None, float]]  # (a signal, or None to only wait; then how long to wait)
KILL_WAIT_S = 2.0
REFRESH_EVERY_S = 0.25  # the processes below those held: not at every poll of a 20 Hz loop
# ... read from each one's /proc children file (its main thread's children: a few small reads
# for the whole tree), and every SCAN_EVERY_S from a walk of all of /proc, which also finds a
# child another thread forked; that walk costs ~5 ms on a quiet machine's 70 processes,
# tens on a busy node's thousand, which a sidecar following a service for days would pay
# every second.
SCAN_EVERY_S = 5.0
WAIT_STEP_S = 0.05


def new_token() -> str:
    return f"{os.getpid()}-{os.urandom(6).hex()}"


class ProcessTree:
    """Every process of one run: what was started (the roots) and everything below it."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token or new_token()
        self.roots: dict[int, psutil.Process] = {}  # started by hicache, which reaps them itself
        self.known: dict[int, psutil.Process] = {}
        # where orphans are reparented (subreapers), and the token an orphan there must carry
        self.adopters: dict[int, str] = {os.getpid(): self.token}
        self._refreshed_at = self._scanned_at = float("-inf")

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """`env` with the tree's token, which every process below inherits."""
        return {**env, TREE_ENV: self.token}

    @contextlib.contextmanager
    def adopting(self) -> Iterator[None]:
        """While the tree runs, orphans below it are reparented here, not to init."""
        with child_subreaper():
            try:
                yield
            finally:
                self.reap()

    def add_root(self, pid: int) -> None:
        with contextlib.suppress(psutil.Error):
            self.roots[pid] = self.known[pid] = psutil.Process(pid)

    def add(self, pids: Iterable[int]) -> None:
        for pid in pids:
            if pid not in self.known:
                with contextlib.suppress(psutil.Error):
                    self.known[pid] = psutil.Process(pid)

    def refresh(self, pids: Iterable[int] = (), force: bool = False) -> None:
        """Take handles on what is new: the descendants of the roots and of everything held,
        the orphans reparented to an adopter that carry its token, and `pids` (from samples)."""
        self.add(pids)
        now = time.monotonic()
        if not force and now - self._refreshed_at < REFRESH_EVERY_S:
            return
        self._refreshed_at = now
        held = [pid for pid, proc in self.known.items() if proc.is_running()]  # (not a pid reused since)
        children = None if force or now - self._scanned_at >= SCAN_EVERY_S else _children_files([*held, *self.adopters])
        if children is None:
            self._scanned_at = now
            children = {}
            for proc in psutil.process_iter(["ppid"]):
                children.setdefault(proc.info["ppid"], []).append(proc.pid)
        for adopter, token in self.adopters.items():
            for pid in children.get(adopter, []):
                if pid not in self.known and pid not in self.adopters and _carries(pid, token):
                    self.add([pid])
        queue = held
        while queue:  # everything below what is held
            for child in children.get(queue.pop(), []):
                if child not in self.known and child not in self.adopters:
                    self.add([child])
                    queue.append(child)

    def sweep(self) -> None:
        """Every process of this user that carries the token, wherever it was reparented (no
        subreaper on this system, or a process that moved away from it)."""
        me = os.getuid()
        for proc in psutil.process_iter(["uids"]):
            uids = proc.info["uids"]
            if proc.pid in self.known or proc.pid in self.adopters or uids is None or uids.real != me:
                continue
            if _carries(proc.pid, self.token):
                self.add([proc.pid])

    def running(self) -> list[psutil.Process]:
        alive = []
        for proc in self.known.values():
            with contextlib.suppress(psutil.Error):
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
        return alive

    def signal(self, signo: int, groups: bool = True) -> None:
        """`signo` to every process still running (with `groups`, to each root's process
        group first: a program's own children that were never seen)."""
        if groups:
            for root in self.roots.values():
                with contextlib.suppress(psutil.Error, OSError):
                    if root.is_running() and root.status() != psutil.STATUS_ZOMBIE:
                        os.killpg(root.pid, signo)
        for proc in self.running():
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signo)

    def wait(self, timeout_s: float, done: Callable[[], bool] | None = None) -> bool:
        """Wait until nothing of the tree runs (or `done()`); True if it came to that."""
        finished = done or (lambda: not self.running())
        deadline = time.monotonic() + timeout_s
        while not finished():
            if time.monotonic() >= deadline:
                return False
            self.reap()
            time.sleep(WAIT_STEP_S)
        return True

    def end(self, ladder: Ladder, done: Callable[[], bool] | None = None, groups: bool = True) -> bool:
        """Climb `ladder` until the tree has ended (or `done()`): each step's signal to every
        process, then its grace. True when it ended."""
        finished = done or (lambda: not self.running())
        for signo, grace_s in ladder:
            self.refresh(force=True)
            if finished():
                return True
            if signo is not None:
                self.signal(signo, groups)
            if self.wait(grace_s, finished):
                return True
        return finished()

    def reap(self) -> None:
        """Collect the exit status of orphans reparented here: nobody else will (the roots
        are reaped by whoever started them), so none lingers as a zombie."""
        me = os.getpid()
        for pid, proc in list(self.known.items()):
            if pid in self.roots:
                continue
            with contextlib.suppress(psutil.Error, OSError):
                if proc.ppid() == me:
                    os.waitpid(pid, os.WNOHANG)


def _children_files(pids: Iterable[int]) -> dict[int, list[int]] | None:
    """The children each of `pids`' main thread forked, by parent, from /proc/PID/task/PID/children;
    None where the kernel has no such files (built without CONFIG_PROC_CHILDREN). A process gone
    meanwhile has none."""
    children: dict[int, list[int]] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/task/{pid}/children", "rb") as file:
                children[pid] = [int(child) for child in file.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{pid}"):
                continue  # gone
            return None
        except OSError:
            continue
    return children


def _carries(pid: int, token: str) -> bool:
    """Whether the process's environment (as it was exec'd, or inherited by a fork) holds `token`."""
    try:
        return psutil.Process(pid).environ().get(TREE_ENV) == token
    except (psutil.Error, OSError):
        return False


@dataclass(frozen=True)
class Stop:
    """Why hicache ends the run itself."""

    reason: str
    stalls: tuple[Stall, ...] = ()  # what the watchdog found, when it was the watchdog
    interrupted: bool = False  # a stop signal to hicache: the strategy stops as fast as it safely can


@dataclass(frozen=True)
class Watchdog:
    """Stalls and hangs read off the samples (watchdog.find_stalls); the stuck processes on
    this machine are asked for their stacks (hicache_cli.stacks, into the run directory's
    stacks files) before the run is stopped."""

    run_dir: Path
    stall_timeout_s: float
    hang_after_s: float
    here: Callable[[dict[int, list[Sample]], int], bool] = lambda samples, rank: True

    def check(self, samples: dict[int, list[Sample]]) -> Stop | None:
        stalls = find_stalls(samples, time.time(), self.stall_timeout_s, self.hang_after_s)
        if not stalls:
            return None
        stuck = {s.pid: stacks_file(self.run_dir, s.rank) for s in stalls if self.here(samples, s.rank)}
        stacks.request(stuck)
        return Stop("watchdog: " + "; ".join(s.message for s in stalls), tuple(stalls))


class Strategy(Protocol):
    """How one kind of process tree starts, ends by itself, and is stopped."""

    tree: ProcessTree
    follower: RunFollower
    watchdog: Watchdog | None

    def start(self) -> None: ...

    def exited(self) -> bool:
        """Whether the run has ended by itself (torchrun exited, every rank reported, ...)."""
        ...

    def pids_of(self, samples: dict[int, list[Sample]]) -> Iterable[int]:
        """The processes the samples name that are this machine's to signal."""
        ...

    def check(self, samples: dict[int, list[Sample]], now: float) -> Stop | None:
        """What the strategy itself watches at each poll (deadlines, the other nodes)."""
        ...

    def may_stop_early(self, samples: dict[int, list[Sample]]) -> bool:
        """Whether an early stop may be asked about yet (every rank has started, ...)."""
        ...

    def stop_early(self, samples: dict[int, list[Sample]], reason: str, now: float) -> Stop | None:
        """The verdict is settled: end the run now (a Stop) or let the processes end it."""
        ...

    def stop(self, stop: Stop | None) -> None:
        """End everything that still runs; `stop` None: the run ended by itself."""
        ...

    def outcome(self, stop: Stop | None) -> RunOutcome:
        """What the strategy knows of how the run ended (exit codes, stalls, nodes)."""
        ...


class GuardedView:
    """Calls the view; if its output goes away (a closed pipe, a full disk) the run goes on
    without it: measuring matters more than showing."""

    def __init__(self, view: View | None) -> None:
        self.view = view
        self.error: OSError | None = None

    def __call__(self, samples: dict[int, list[Sample]], elapsed: float) -> None:
        if self.view is None:
            return
        try:
            self.view(samples, elapsed)
        except OSError as exc:
            self.view, self.error = None, exc


def follow(
    strategy: Strategy,
    view: View | None = None,
    early_stop: EarlyStop | None = None,
    poll_s: float = 0.5,
    reraise_interrupt: bool = False,
) -> RunOutcome:
    """Start the tree, follow it until it ends (by itself, by a Stop, by a stop signal), end
    whatever is left of it, and say how the run ended. Nothing of the tree outlives this.

    `view(samples, elapsed)` sees the samples at every poll; `early_stop(samples)` may return a
    reason to end the run before its duration. A stop signal (KeyboardInterrupt) makes an
    interrupted outcome, or with `reraise_interrupt` (pytest's Ctrl-C) is raised again once
    the tree has ended."""
    started, launched_wall = time.monotonic(), time.time()
    shown = GuardedView(view)
    follower = strategy.follower
    stop: Stop | None = None
    interrupted_by: str | None = None
    stopped_early: str | None = None
    with strategy.tree.adopting():
        try:
            strategy.start()
            while not strategy.exited():
                samples = follower.poll()
                now = time.monotonic()
                shown(samples, now - started)
                strategy.tree.refresh(strategy.pids_of(samples))
                stop = strategy.check(samples, now) or (strategy.watchdog and strategy.watchdog.check(samples))
                if stop:
                    break
                if early_stop is not None and stopped_early is None and strategy.may_stop_early(samples):
                    stopped_early = early_stop(samples)
                    if stopped_early is not None and (stop := strategy.stop_early(samples, stopped_early, now)):
                        break
                time.sleep(poll_s)
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP (lifecycle.StopRequests)
            interrupted_by = STOPS.signal or "SIGINT"
            stop = Stop(f"interrupted by {interrupted_by}", interrupted=True)
            if reraise_interrupt:
                with STOPS.finishing():
                    strategy.stop(stop)
                raise
        except BaseException:
            with STOPS.finishing():
                strategy.stop(Stop("hicache itself failed", interrupted=True))
            raise
        with STOPS.finishing():  # from here on a signal is noted, never cuts the stop short
            strategy.stop(stop)
            shown(follower.poll(), time.monotonic() - started)
    return strategy.outcome(stop).with_run(
        interrupted_by=interrupted_by,
        stopped_early=stopped_early,
        wall_s=time.monotonic() - started,
        launched_wall=launched_wall,
        followed=follower.run,
    )
