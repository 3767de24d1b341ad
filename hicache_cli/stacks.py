"""Every thread's stack, asked for from outside the process, without crashing it.

faulthandler's dump (`register(SIGUSR1, all_threads=True)`) reads every thread's frames in
a signal handler, without the GIL: while another thread runs Python meanwhile (a sampler,
the program's own), it reads frames as they change. A rank blocked in gloo's recv with
hicache's probe beside it died of SIGSEGV about once in a thousand such dumps (measured:
scripts/stack_dump_probe.py), and once in CI, its stack lost with it.

So a process arms a thread of its own that waits on a FIFO beside the dump file; a byte
written there (`ask`) makes it write the stack of every other thread, in faulthandler's
format, holding the GIL (`sys._current_frames`), which nothing can change under it.
faulthandler stays registered on SIGUSR1, asked only when the FIFO goes unanswered: the
process has no such thread (not armed yet, forked) or a thread stuck in C holds the GIL -
and then no other thread runs Python while faulthandler reads.

Standard library only: the tracer arms it inside other programs.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import stat
import sys
import threading
import time
from pathlib import Path
from typing import IO

from hicache_cli.files import run_file
from hicache_cli.lifecycle import owner_alive

SIGNAL = signal.SIGUSR1  # the fallback: faulthandler's dump from C
MAX_FRAMES = 100  # faulthandler's own limit a thread
THREAD_NAME = "hicache-stacks"
ASK_SUFFIX = ".ask"
WAIT_S = 3.0  # what a caller waits for the dumps to be written (faulthandler asked at a third)
_ARMED: list[IO[str]] = []


def ask_path(dump: Path) -> Path:
    """The FIFO beside a dump file that asks for a dump."""
    return dump.with_name(dump.name + ASK_SUFFIX)


def arm(dump: Path) -> IO[str]:
    """Start answering requests for this process's stacks, written to `dump` (a new run
    file: never through a link), open for the process's life. The FIFO is made here, 0600;
    where it cannot be (a name already taken), only the signal answers."""
    out = run_file(dump, "truncate")
    _ARMED.append(out)  # open for good: faulthandler holds its descriptor, not the file
    faulthandler.register(SIGNAL, file=out, all_threads=True)
    fifo = ask_path(dump)
    try:
        os.mkfifo(fifo, 0o600)
        # read and write, opened before arm returns: an ask from then on finds a reader, and a
        # writer of our own keeps the FIFO open, so asks never find it shut
        fd = os.open(fifo, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return out
    threading.Thread(target=_answer, args=(fd, out), name=THREAD_NAME, daemon=True).start()
    return out


def disarm() -> None:
    """No more dumps (a traced program leaving): faulthandler let go of the signal, the dump
    files closed; the answering thread, blocked in its read, writes nothing more."""
    faulthandler.unregister(SIGNAL)
    while _ARMED:
        _ARMED.pop().close()


def _answer(fd: int, out: IO[str]) -> None:
    while os.read(fd, 64):  # waits without the GIL; asks close together are answered once
        with contextlib.suppress(OSError, ValueError):
            out.write(dump_text())
            out.flush()


def dump_text() -> str:
    """Every thread's stack but this one's, innermost frame first, in faulthandler's words
    (`Thread 0x... (most recent call first):` then `  File "f", line N in name`)."""
    me = threading.get_ident()
    blocks = []
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue
        lines = [f"Thread 0x{ident:016x} (most recent call first):"]
        depth = 0
        while frame is not None and depth < MAX_FRAMES:
            code = frame.f_code
            lines.append(f'  File "{code.co_filename}", line {frame.f_lineno} in {code.co_name}')
            frame, depth = frame.f_back, depth + 1
        if frame is not None:
            lines.append("  ...")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n\n"


def ask(dump: Path) -> bool:
    """Ask the process that armed `dump` for its stacks through the FIFO; False when no
    thread there is waiting on it (then the signal is the way)."""
    try:
        fd = os.open(ask_path(dump), os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return False  # no reader (ENXIO), no FIFO, a link in its place, not ours
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
        os.write(fd, b"\n")
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def request(dumps: dict[int, Path], wait_s: float | None = None, poll_s: float = 0.05) -> None:
    """Ask each process (pid: its dump file) for its stacks and wait until every dump has
    been written (a process that is gone is not waited for), or `wait_s`. The FIFO first;
    faulthandler's signal where the FIFO is not there or, after a third of the wait, has not
    been answered - and only where the dump file exists: `arm` registered faulthandler on it
    (a program that keeps SIGUSR1 for itself is never sent one). `wait_s`: WAIT_S unless given."""
    wait_s = WAIT_S if wait_s is None else wait_s
    before = {pid: _size(dump) for pid, dump in dumps.items()}
    unasked = {pid: dump for pid, dump in dumps.items() if not ask(dump)}
    _signal(unasked)
    start, sizes = time.monotonic(), dict[int, int]()
    late: float | None = start + wait_s / 3
    while time.monotonic() < start + wait_s:
        time.sleep(poll_s)
        latest = {pid: _size(dump) for pid, dump in dumps.items()}
        # the dead (and zombies) say nothing: owner_alive of a bare pid
        answering = [pid for pid in dumps if latest[pid] > before[pid] or owner_alive(f"{pid}:")]
        if all(latest[pid] > before[pid] and latest[pid] == sizes.get(pid) for pid in answering):
            return  # every dump written, and done growing (a killed rank's caller is not kept waiting)
        if late is not None and time.monotonic() >= late:
            late = None  # a thread stuck in C holds the GIL: only faulthandler can answer
            _signal({pid: d for pid, d in dumps.items() if pid not in unasked and latest[pid] == before[pid]})
        sizes = latest


def _signal(dumps: dict[int, Path]) -> None:
    for pid, dump in dumps.items():
        if dump.exists():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, SIGNAL)


def remove_asks(run_dir: Path) -> None:
    """The FIFOs of a run whose processes are gone (a FIFO left in a run directory would
    hang whatever reads it: `cat`, `grep -r`, an archiver)."""
    for path in run_dir.glob("*" + ASK_SUFFIX):
        with contextlib.suppress(OSError):
            if stat.S_ISFIFO(path.lstat().st_mode):
                path.unlink()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
