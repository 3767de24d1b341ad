"""One observed process: its rank file in the run directory, the probe that samples it,
and how its last line gets written however it ends.

A process becomes observed when it starts a process group (`hicache trace`), or when
`hicache attach` injects its agent into it (attach/agent.py): then it is a guest, and
ends as one (Ending). Its file is `rank-N.jsonl`
with N its torch.distributed rank, or, when that name is taken (a second process group
with the same ranks: test after test), the next N of the same residue modulo the world
size. The probe is a daemon thread that waits on an event, so the program's signals stay
the program's: nothing is blocked, no handler is replaced.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from hicache_cli import stacks
from hicache_cli.files import open_run_file
from hicache_cli.lifecycle import Lifeline
from hicache_cli.protocol import (
    DETACHED_PREFIX,
    EXITED,
    LIFELINE_EVERY_S,
    ORPHANED_EXIT,
    STOPPED_AT_END,
    samples_file,
    stacks_file,
)
from hicache_cli.rank.probe import LoopStats, Probe, RankIdentity, Readings
from hicache_cli.sample import Sample
from hicache_cli.tracer.protocol import STOP_FILE, TraceEnv
from hicache_cli.tracer.works import SITES_REPORTED, WorkTable

SITES_EVERY_S = 1.0  # sites ride on a sample at most this often (and on the final line)
# At exit the sampling thread is joined before the interpreter finalizes: a daemon thread
# cut off then, inside a torch destructor that released the GIL (a Work's, a tensor's, a
# process group's: garbage its allocations made the collector free), aborts the whole
# process ("terminate called without an active exception"). Bounded: an exit never hangs.
JOIN_AT_EXIT_S = 5.0
FINAL_SITES = 50
ORPHAN_GRACE_S = 3.0  # after SIGTERM to itself, how long an orphaned program gets to end


@dataclass(frozen=True)
class Ending:
    """How the observing of a process ends.

    `hicache trace` owns the program: its stop file ends the sampling, and when hicache is
    gone the program is ended as hicache would have ended it. `hicache attach` is a guest in
    a program it did not start (`guest`): it arms no signal handler, never signals the
    program, stops observing when hicache is gone, and `Session.detach` undoes the rest."""

    stop_file: str = STOP_FILE  # in the run directory, or an absolute path (an attach's, in hicache's own directory)
    stop_message: str = STOPPED_AT_END
    guest: bool = False
    # the stop file is the agent's to act on: it writes the final line itself (a follow's, after
    # its census at detach, whose count that line carries)
    agent_ends: bool = False


TRACED = Ending()


def claim_rank_file(run_dir: Path, rank: int, world_size: int, tries: int = 10_000) -> tuple[int, IO[str]]:
    """Create this process's rank file exclusively: its rank's, or the next free slot
    rank + k * world_size. Two processes never share one."""
    slot = rank
    for _ in range(tries):
        try:
            fd = open_run_file(samples_file(run_dir, slot), "new")  # never through a symlink; 0600
        except FileExistsError:
            slot += max(1, world_size)
            continue
        return slot, os.fdopen(fd, "a", encoding="utf-8")
    raise RuntimeError(f"no free rank file in {run_dir}")


class TracedProbe(Probe):
    """The rank probe's sampling, inside a program hicache does not own: no deadline, no
    signals; it stops when hicache asks (the stop file), at exit, or when hicache is gone.
    A failure of its own ends the sampling, never the program."""

    def __init__(self, *args: Any, stop_file: Path, table: WorkTable, ending: Ending = TRACED, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stop_file = stop_file
        self.table = table
        self.ending = ending
        self._stopped = threading.Event()
        self._sites_at = 0.0
        self.exit_code: int | None = None  # the code the program leaves with, where it says (the final line)
        self.group_left_up: bool | None = None  # its default process group was up as it exited (the final line)

    def round_age(self) -> float:
        """Only a call of the --loop function under way has an age: between calls the
        program is not in a round."""
        return time.perf_counter() - self.stats.round_started if self.stats.in_round else 0.0

    def sample(
        self,
        kind: str = "sample",
        message: str | None = None,
        signal_name: str | None = None,
        error: tuple[str, int | None] | None = None,
    ) -> Sample:
        taken = super().sample(kind, message, signal_name, error)
        now = time.monotonic()
        if kind == "final" or now - self._sites_at >= SITES_EVERY_S:
            self._sites_at = now
            sites = self.table.top_sites(FINAL_SITES if kind == "final" else SITES_REPORTED)
            if kind == "final":
                taken = replace(taken, sites=sites, exit_code=self.exit_code, group_left_up=self.group_left_up)
            else:
                taken = replace(taken, sites=sites)
        return taken

    def _run(self) -> None:
        try:
            self._sample_until_stopped()
        except OSError as exc:  # its file could not be written (a full disk): one line, the program goes on
            self._closed = True
            if not self.ending.guest:
                sys.stderr.write(f"hicache trace: pid {os.getpid()}: samples could not be written "
                                 f"({exc.strerror or exc}); sampling stopped\n")  # fmt: skip
        except Exception:  # noqa: BLE001 - the program must go on without us
            if not self.ending.guest:  # a guest says nothing in the program's output (its agent reports it)
                sys.stderr.write(f"hicache trace: sampling stopped in pid {os.getpid()}:\n{traceback.format_exc()}")

    def finish(self, *args: Any, **kwargs: Any) -> None:
        """The final line, unless it cannot be written (a full disk): a program hicache
        observes never sees an error of hicache's, at its exit least of all."""
        try:
            super().finish(*args, **kwargs)
        except OSError:
            self._closed = True

    def _sample_until_stopped(self) -> None:
        next_at = time.monotonic()
        check_lifeline_at = next_at + LIFELINE_EVERY_S
        while True:
            next_at += self.interval
            if self._stopped.wait(max(0.0, next_at - time.monotonic())):
                return
            now = time.monotonic()
            if not self.ending.agent_ends and self.stop_file.exists():
                self.finish("done", self.ending.stop_message)
                return
            if self.lifeline is not None and now >= check_lifeline_at:
                check_lifeline_at = now + LIFELINE_EVERY_S
                if (lost := self.lifeline.lost()) is not None:
                    self._stop_orphaned(lost)
                    return
            if not self._write(self.sample()):
                return
            if next_at < now:
                next_at = now

    def _stop_orphaned(self, why: str) -> None:
        """hicache is gone: nobody watches this program any more, so it is ended as
        hicache would have ended it (SIGTERM, then SIGKILL if it does not go). A guest
        only stops observing: the program was running before hicache came."""
        if self.ending.guest:
            self.finish("interrupted", f"{DETACHED_PREFIX}{why}")
            return
        self.finish("interrupted", f"stopped: {why}")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(ORPHAN_GRACE_S)
        os._exit(ORPHANED_EXIT)

    def close(self, state: str, message: str) -> None:
        self._stopped.set()
        self.finish(state, message)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the sampling thread to end (whatever ended it); whether it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()


class Session:
    """The observed process: started once, when its first process group is."""

    def __init__(
        self,
        env: TraceEnv,
        table: WorkTable,
        loop: LoopStats,
        rank: int,
        world_size: int,
        ending: Ending = TRACED,
        world: str | None = None,
    ) -> None:
        self.env = env
        self.table = table
        self.rank = rank
        self.world_size = world_size
        self.slot, out = claim_rank_file(env.run_dir, rank, world_size)
        self.out = out
        self._stacks = False if ending.guest else _arm_stack_dumps(env.run_dir, self.slot)
        self.error: str | None = None
        self.exiting = False  # the process is ending (its exit hooks, or os._exit)
        now = time.monotonic()
        self.probe = TracedProbe(
            RankIdentity(rank, rank, 0, 0, socket.gethostname(), world),
            loop,
            self.read,
            out,
            env.hz,
            now,
            float("inf"),
            0.0,
            lifeline=Lifeline(env.owner) if env.owner else None,
            stop_file=env.run_dir / ending.stop_file,
            table=table,
            ending=ending,
        )
        self._gpu = _gpu_reader()
        self.pid = os.getpid()
        self._previous_hook = sys.excepthook
        sys.excepthook = self._excepthook
        self._real_exit = os._exit
        os._exit = self._os_exit  # type: ignore[assignment] - the final line first, then the real exit
        atexit.register(self._at_exit)
        self.probe.start()

    def read(self) -> Readings:
        totals = self.table.totals()
        gpu_bytes, device = self._gpu()
        return Readings(
            depth=totals.live,
            held_bytes=max(0, totals.live_bytes),
            sent=totals.sent,
            received=totals.received,
            blocked_on=self.table.blocked_on,
            blocked_peer=self.table.blocked_peer,
            counters={"world_size": self.world_size},
            works=totals.counts(),
            peers=self.table.messages.snapshot(),
            gpu_bytes=gpu_bytes,
            device_name=device,
        )

    def detach(self, message: str, join_s: float = 5.0) -> list[str]:
        """Stop observing and put back what the session changed (a guest's end): the final
        line, the sampling thread ended, sys.excepthook, os._exit and the exit hook. What
        the program has replaced since (and so may still call) is left and named. (At the
        program's exit the final line is already written: the first one stays.)"""
        self.probe.close("done", message)
        leftovers = [] if self.probe.join(join_s) else ["the sampling thread (still running)"]
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._previous_hook
        else:
            leftovers.append("sys.excepthook (the program replaced it since)")
        if os._exit == self._os_exit:
            os._exit = self._real_exit
        else:
            leftovers.append("os._exit (the program replaced it since)")
        atexit.unregister(self._at_exit)
        self.out.close()
        return leftovers

    def _excepthook(self, kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        self.error = f"{kind.__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:300]
        self._previous_hook(kind, exc, tb)

    def _os_exit(self, code: int) -> None:
        if os.getpid() == self.pid:  # not in a forked child, whose file this is not
            self.exiting = True
            self.probe.exit_code = code
            state = "done" if code == 0 else "error"
            self.probe.close(state, f"the process left with os._exit({code})")
        self._real_exit(code)

    def _at_exit(self) -> None:
        if os.getpid() != self.pid:
            return
        self.exiting = True
        if self.error:
            self.probe.exit_code = 1  # Python's exit code after an uncaught exception
            self.probe.close("error", self.error)
        else:
            self.probe.group_left_up = default_group_up()
            self.probe.close("done", EXITED)
        self.probe.join(JOIN_AT_EXIT_S)
        if self._stacks:
            stacks.disarm()


def default_group_up() -> bool | None:
    """Whether the program's default process group is still up (None: torch cannot say). A
    gloo group left up at exit can abort the process as its interpreter finalizes (torch's
    exit race: docs/attach.md#a-program-that-exits-while-attached)."""
    dist = sys.modules.get("torch.distributed")
    try:
        return bool(dist.is_available() and dist.is_initialized()) if dist is not None else None
    except Exception:  # noqa: BLE001 - the program is leaving: nothing of ours may stop it
        return None


def _arm_stack_dumps(run_dir: Path, slot: int) -> bool:
    """Every thread's stack for the watchdog when it asks, as in hicache's own ranks, but
    only where the program left SIGUSR1 alone (the fallback's signal, whose default would
    kill it)."""
    if signal.getsignal(signal.SIGUSR1) != signal.SIG_DFL:
        return False
    try:
        stacks.arm(stacks_file(run_dir, slot))
    except (OSError, ValueError, RuntimeError):
        return False
    return True


def _gpu_reader() -> Callable[[], tuple[int | None, str]]:
    """CUDA memory allocated, read only once the program itself has initialised CUDA."""
    torch = sys.modules.get("torch")

    def read() -> tuple[int | None, str]:
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and cuda.is_initialized():
            index = cuda.current_device()
            return int(cuda.memory_allocated(index)), f"cuda:{index}"
        return None, "cpu"

    return read
