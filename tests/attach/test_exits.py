"""attach/exits.py: the kernel's word on how a process ended, heard for real processes
(where this machine lets hicache listen: root, process events in the kernel)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from hicache_cli.attach.exits import Exit, ExitWatch


def test_a_wait_status_reads_as_a_code_or_a_signal() -> None:
    assert (Exit(1, 3 << 8, 0.0).exit_code, Exit(1, 3 << 8, 0.0).signal) == (3, None)
    assert (Exit(1, 0, 0.0).exit_code, Exit(1, 0, 0.0).signal) == (0, None)
    aborted = Exit(1, signal.SIGABRT | 0x80, 0.0)  # core dumped
    assert (aborted.exit_code, aborted.signal) == (None, "SIGABRT")


@pytest.fixture
def watch() -> ExitWatch:
    watch = ExitWatch()
    if not watch.start():
        pytest.skip(f"this machine does not let hicache listen: {watch.refusal}")
    yield watch
    watch.close()


def _ended(watch: ExitWatch, pid: int) -> Exit:
    deadline = time.monotonic() + 10
    while (seen := watch.ended(pid)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen is not None, f"no exit heard for pid {pid}"
    return seen


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("import sys; sys.exit(3)", (3, None)),
        ("import os; os.abort()", (None, "SIGABRT")),
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", (None, "SIGTERM")),
        ("pass", (0, None)),
    ],
)
def test_how_a_process_that_is_not_ours_ended(watch: ExitWatch, code: str, expected: tuple) -> None:
    """The processes are started here only to have real ones end: their status is read from
    the kernel's events, not from waitpid."""
    child = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.DEVNULL)
    child.wait()
    seen = _ended(watch, child.pid)
    assert (seen.exit_code, seen.signal) == expected


def test_a_refusal_is_said_in_words_when_the_kernel_will_not_tell(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr("socket.socket.bind", refuse)
    watch = ExitWatch()
    assert not watch.start()
    assert watch.refusal == (
        "the kernel's process events are not open to hicache (Operation not permitted: they need root)"
    )
    assert watch.ended(1) is None
