"""How a run ends, whatever ends it.

In hicache: SIGINT, SIGTERM and SIGHUP all stop a run the same way (every process below
it stopped, final lines kept, a report marked interrupted), and hicache exits with
128 + the signal's number. A second signal while it stops is noted, not acted on: the
stop takes seconds, and cutting it short would lose what was measured.

Below it: nothing can catch SIGKILL (the OOM killer), so every process hicache starts
learns on its own that hicache is gone. The child it starts gets the parent-death signal
(Linux); every rank and every traced process also watches hicache's pid, named in the
environment by `OWNER_ENV`, and stops itself within a second of it going away.

Stdlib only: the traced side imports this inside programs that may lack psutil.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable, Iterator
from types import FrameType

from hicache_cli.protocol import OWNER_ENV

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def exit_code_for(signal_name: str | None) -> int:
    """The shell's convention: 128 + the signal's number (SIGINT when not known)."""
    try:
        return 128 + int(signal.Signals[signal_name]) if signal_name else 128 + int(signal.SIGINT)
    except KeyError:
        return 128 + int(signal.SIGINT)


class StopRequests:
    """The stop signals hicache received; the first one raises KeyboardInterrupt unless
    hicache is finishing (writing its report), which no signal should cut short."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self._finishing = 0
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        for signo in STOP_SIGNALS:
            with contextlib.suppress(ValueError, OSError):  # not the main thread, or not on this OS
                self._previous[signo] = signal.signal(signo, self._handle)

    def restore(self) -> None:
        for signo, handler in self._previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signo, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, signo: int, _frame: FrameType | None) -> None:
        first = self.signal is None
        if first:
            self.signal = signal.Signals(signo).name
        if first and not self._finishing:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def finishing(self) -> Iterator[None]:
        """While hicache writes what a run left: signals are noted, not raised."""
        self._finishing += 1
        try:
            yield
        finally:
            self._finishing -= 1

    def exit_code(self) -> int:
        return exit_code_for(self.signal)


STOPS = StopRequests()  # the process's one set of handlers (installed by main())


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc), or None: a pid with
    its start time names one process, even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else None


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()[0].decode()


def owner_token(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{process_start(pid) or ''}"


def owner_alive(token: str) -> bool:
    """Whether the process `owner_token` named is still running (a zombie is not)."""
    pid_text, _, start = token.partition(":")
    try:
        pid = int(pid_text)
    except ValueError:
        return True  # not ours to judge
    if os.path.isdir("/proc"):
        state = _state(pid)
        return state is not None and state not in ("Z", "X") and (not start or process_start(pid) == start)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Lifeline:
    """Tells a process started below hicache that it has been left behind: hicache is gone
    (SIGKILL, the OOM killer) or, with `watch_parent`, the process that started it is
    (torchrun killed under a rank)."""

    def __init__(self, owner: str | None = None, watch_parent: bool = False) -> None:
        self.owner = owner if owner is not None else os.environ.get(OWNER_ENV)
        self.parent = os.getppid() if watch_parent else None

    def lost(self) -> str | None:
        """Why this process is orphaned, or None while everything above it runs."""
        if self.parent is not None and os.getppid() != self.parent:
            return f"its parent process (pid {self.parent}) is gone"
        if self.owner and not owner_alive(self.owner):
            return f"hicache (pid {self.owner.partition(':')[0]}) is gone"
        return None


def parent_death_signal(signo: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A Popen `preexec_fn` that makes the child get `signo` when hicache dies (Linux);
    None elsewhere. libc is loaded here, in the parent, so the child only makes one call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signo), 0, 0, 0)
        if os.getppid() != parent:  # hicache died before the signal was armed
            os.kill(os.getpid(), signo)

    return arm


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux): a process below it whose parent ends is
    reparented here, not to init, so it can still be found and stopped. True if it is one."""
    prctl = _prctl()
    return prctl is not None and prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


@contextlib.contextmanager
def child_subreaper() -> Iterator[bool]:
    """This process a child subreaper for the duration (what it was is restored after: the
    library may run inside someone else's program). Yields whether it could be made one."""
    prctl = _prctl()
    if prctl is None:
        yield False
        return
    was = ctypes.c_int(0)
    prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0)
    made = prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    try:
        yield made
    finally:
        if made and not was.value:
            prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
