"""Asking a process for every thread's stack (hicache_cli.stacks): through its FIFO, a thread
of its own answering with the GIL held; faulthandler's signal where the FIFO goes unanswered."""

from __future__ import annotations

import faulthandler
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hicache_cli import stacks
from hicache_cli.protocol import stacks_file
from hicache_cli.watchdog import blocked_frame

REPO = Path(__file__).resolve().parents[1]


def _park(ready: threading.Event, release: threading.Event) -> None:
    ready.set()
    release.wait()


def test_the_dump_reads_as_faulthandler_s(tmp_path: Path) -> None:
    """Each thread's frames line for line as faulthandler writes them, under a header the
    watchdog reads the thread's ident from; the thread that writes is left out."""
    ready, release = threading.Event(), threading.Event()
    parked = threading.Thread(target=_park, args=(ready, release), daemon=True)
    parked.start()
    ready.wait()
    try:
        ours = stacks.dump_text()
        theirs = tmp_path / "faulthandler.txt"
        with theirs.open("w") as fh:
            faulthandler.dump_traceback(file=fh, all_threads=True)
    finally:
        release.set()
        parked.join()
    assert parked.ident is not None
    header = f"Thread 0x{parked.ident:016x} (most recent call first):"
    ours_block = ours.split(header)[1].split("\n\n")[0]
    theirs_block = theirs.read_text().split(header)[1].split("\n\n")[0]
    assert ours_block == theirs_block
    assert blocked_frame(ours, parked.ident).startswith("wait (threading.py:")  # the Event's wait
    assert f"0x{threading.get_ident():016x}" not in ours  # the writing thread (here the test's)


# A process that arms, prints its main thread's ident, and waits in `serve` (blocked in C, the
# GIL released, as a rank blocked in gloo) while a sampler thread runs Python beside it; or,
# with "hold", runs a regular expression that holds the GIL in C for minutes.
PROGRAM = r"""
import os, re, sys, threading, time
from pathlib import Path
from hicache_cli import stacks
stacks.arm(Path(sys.argv[1]))
def sample():
    while True:
        str({"stat": Path("/proc/self/stat").read_text().split()[13], "n": threading.active_count()})
        time.sleep(0.001)
threading.Thread(target=sample, daemon=True).start()
def serve():
    print(threading.get_ident(), flush=True)
    if sys.argv[2] == "hold":
        re.match(r"(a+)+$", "a" * 40 + "b")
    os.read(os.pipe()[0], 1)
serve()
"""


def line_of(text: str) -> int:
    return 1 + PROGRAM.splitlines().index(text)


def _start(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], Path, int]:
    dump = stacks_file(tmp_path, 0)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM, str(dump), mode], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None
    main_thread = int(proc.stdout.readline())
    return proc, dump, main_thread


def test_a_process_asked_hundreds_of_times_answers_each_and_lives_on(tmp_path: Path) -> None:
    """faulthandler's dump killed such a process (SIGSEGV) after 34-194 asks in
    scripts/stack_dump_probe.py; asked through the FIFO, it answers every time."""
    proc, dump, main_thread = _start(tmp_path, "serve")
    try:
        blocked = f'File "<string>", line {line_of("    os.read(os.pipe()[0], 1)")} in serve'
        for asked in range(1, 301):  # each ask answered before the next (asks close together are answered once)
            assert stacks.ask(dump)
            deadline = time.monotonic() + 10
            while dump.read_text().count(" in serve") < asked and time.monotonic() < deadline:
                time.sleep(0.001)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        text = dump.read_text()
        assert text.count(" in serve") == 300
        assert text.count(blocked) >= 299  # the first may have come as it printed, before its read
        assert text.count(f"Thread 0x{main_thread:016x} (most recent call first):") == 300  # as the watchdog reads it
    finally:
        proc.kill()
        proc.wait()


def test_a_thread_holding_the_gil_in_c_is_answered_by_faulthandler(tmp_path: Path) -> None:
    proc, dump, _ = _start(tmp_path, "hold")
    try:
        for _ in range(5):  # the first ask may come before the match begins (the FIFO answers then)
            started = time.monotonic()
            stacks.request({proc.pid: dump}, wait_s=3.0)
            if " in match" in dump.read_text():
                break
        assert time.monotonic() - started < 3.0  # answered by the signal, a third of the way in
        text = dump.read_text()
        assert " in _answer" in text  # faulthandler's dump: the answering thread too, waiting for the GIL
        line = line_of('        re.match(r"(a+)+$", "a" * 40 + "b")')
        assert f'File "<string>", line {line} in serve' in text
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_process_that_is_gone_is_not_waited_for(tmp_path: Path) -> None:
    """A killed rank (a zombie its parent has not reaped yet, here) says nothing: the watchdog
    that asked it goes on at once, not after the whole wait (a crash was read as a hang so)."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while Path(f"/proc/{dead.pid}/stat").read_text().split(") ")[1][0] != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    dump = stacks_file(tmp_path, 0)
    dump.write_text("")  # it had armed
    try:
        started = time.monotonic()
        stacks.request({dead.pid: dump}, wait_s=20.0)
        assert time.monotonic() - started < 10.0
    finally:
        dead.wait()


def test_no_signal_goes_to_a_process_that_did_not_arm(tmp_path: Path) -> None:
    """No dump file (a program that keeps SIGUSR1 for itself was never armed): no signal."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stacks.request({sleeper.pid: stacks_file(tmp_path, 1)}, wait_s=0.3)
        time.sleep(0.2)
        assert sleeper.poll() is None  # SIGUSR1's default would have ended it
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize("planted", ["nothing", "a file", "a link to a FIFO"])
def test_ask_writes_only_to_a_fifo_of_that_name(tmp_path: Path, planted: str) -> None:
    dump = stacks_file(tmp_path, 0)
    fifo = stacks.ask_path(dump)
    if planted == "a file":
        fifo.write_text("")
    elif planted == "a link to a FIFO":
        os.mkfifo(tmp_path / "elsewhere")
        fifo.symlink_to(tmp_path / "elsewhere")
    assert not stacks.ask(dump)
    if planted == "a file":
        assert fifo.read_text() == ""


def test_the_fifos_are_removed_and_nothing_else(tmp_path: Path) -> None:
    os.mkfifo(stacks.ask_path(stacks_file(tmp_path, 0)))
    (tmp_path / "notes.ask").write_text("kept")
    stacks.remove_asks(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.ask"]


def test_no_fifo_without_a_reader_blocks_the_asker(tmp_path: Path) -> None:
    os.mkfifo(stacks.ask_path(stacks_file(tmp_path, 0)))  # left by a process that is gone
    assert not stacks.ask(stacks_file(tmp_path, 0))  # ENXIO at once, never a hang
