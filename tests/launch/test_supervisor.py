"""The supervisor's process tree with real processes: orphans are reparented to the process
that follows the tree (a child subreaper) and known by the tree's token; a daemon a traced
program double-forks at once is stopped with the program."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import hicache_cli as hc
from hicache_cli.launch.supervisor import ProcessTree
from hicache_cli.lifecycle import child_subreaper

DOUBLE_FORK = Path(__file__).resolve().parents[1] / "integration" / "programs" / "double_fork.py"
LADDER = [(signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)]


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def daemons() -> Iterator[list[int]]:
    """Pids a test made; any still running at its end are killed (the test has failed)."""
    made: list[int] = []
    yield made
    for pid in made:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def double_fork(tree: ProcessTree, pid_file: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, str(DOUBLE_FORK), str(pid_file)], env=env or tree.environment(dict(os.environ))
    )
    tree.add_root(proc.pid)
    assert proc.wait(30) == 0  # the program is gone: only its daemon is left
    return proc


def test_an_orphan_comes_to_the_follower_and_is_ended(tmp_path: Path, daemons: list[int]) -> None:
    tree = ProcessTree()
    with tree.adopting():
        double_fork(tree, tmp_path / "daemon.pid")
        daemons.append(pid := int((tmp_path / "daemon.pid").read_text()))
        assert psutil.Process(pid).ppid() == os.getpid()  # reparented here, not to init
        tree.refresh(force=True)
        assert pid in tree.known
        assert tree.end(LADDER)
    assert not alive(pid)
    assert not psutil.pid_exists(pid)  # and reaped: no zombie of it is left behind


def test_an_orphan_without_the_token_is_not_ours(tmp_path: Path, daemons: list[int]) -> None:
    tree = ProcessTree()
    with tree.adopting():
        env = {k: v for k, v in os.environ.items() if k != "HICACHE_TREE"}
        double_fork(tree, tmp_path / "daemon.pid", env)  # started by someone else's code in this process
        daemons.append(pid := int((tmp_path / "daemon.pid").read_text()))
        tree.refresh(force=True)
        assert pid not in tree.known


def test_a_sweep_finds_an_orphan_reparented_elsewhere(tmp_path: Path, daemons: list[int]) -> None:
    """No subreaper (another system, a library caller that is not allowed one): the token alone."""
    tree = ProcessTree()
    double_fork(tree, tmp_path / "daemon.pid")
    daemons.append(pid := int((tmp_path / "daemon.pid").read_text()))
    tree.refresh(force=True)
    assert pid not in tree.known  # not below anything the tree holds
    tree.sweep()
    assert pid in tree.known
    assert tree.end(LADDER)
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


def test_being_a_subreaper_ends_with_the_run() -> None:
    with child_subreaper() as made:
        assert made
    # a later orphan of this process goes to init again (what the library's caller had)
    import ctypes
    import ctypes.util

    value = ctypes.c_int(-1)
    ctypes.CDLL(ctypes.util.find_library("c")).prctl(37, ctypes.byref(value), 0, 0, 0)
    assert value.value == 0


def test_trace_stops_a_daemon_its_program_double_forked_at_once(tmp_path: Path, daemons: list[int]) -> None:
    """The program leaves at once; its daemon is no descendant of anything left, and is found."""
    pid_file = tmp_path / "daemon.pid"
    report = hc.trace([sys.executable, str(DOUBLE_FORK), str(pid_file)], run_dir=tmp_path / "run", capture_output=True)
    daemons.append(pid := int(pid_file.read_text()))
    assert report.program_exit_code == 0
    assert not alive(pid)


def test_the_tree_is_read_from_children_files_and_a_walk_of_proc_finds_what_they_miss(
    monkeypatch: pytest.MonkeyPatch, daemons: list[int]
) -> None:
    """Between two walks of all of /proc, each held process's children file: a grandchild is
    found with no walk at all; a child another thread forked (one still running: a thread's
    children go to the main thread when it ends) waits for the next walk."""
    from hicache_cli.launch import supervisor

    program = (
        "import subprocess, threading, time\n"
        "subprocess.Popen(['bash', '-c', 'sleep 60 & wait'])\n"  # a child, and its own child
        "threading.Thread(target=lambda: [subprocess.Popen(['sleep', '61']), time.sleep(60)]).start()\n"
        "time.sleep(60)\n"
    )
    tree = ProcessTree()
    root = subprocess.Popen([sys.executable, "-c", program])
    daemons.append(root.pid)
    tree.add_root(root.pid)
    tree.refresh(force=True)  # a walk, as the run starts
    monkeypatch.setattr(supervisor, "SCAN_EVERY_S", float("inf"))
    monkeypatch.setattr(supervisor.psutil, "process_iter", lambda *_a, **_k: pytest.fail("walked all of /proc"))
    names: set[str] = set()
    deadline = time.monotonic() + 20
    while names != {"bash", "sleep 60"} and time.monotonic() < deadline:
        time.sleep(supervisor.REFRESH_EVERY_S)
        tree.refresh()
        names = {" ".join(p.cmdline()[:2]) for pid, p in tree.known.items() if pid != root.pid and p.is_running()}
        names = {"bash" if n.startswith("bash") else n for n in names}
    daemons.extend(tree.known)
    assert names == {"bash", "sleep 60"}, names  # the thread's child is not among them
    monkeypatch.undo()
    monkeypatch.setattr(supervisor, "SCAN_EVERY_S", 0.0)
    time.sleep(supervisor.REFRESH_EVERY_S)
    tree.refresh()
    assert "sleep 61" in {" ".join(p.cmdline()) for p in tree.known.values() if p.is_running()}
    daemons.extend(tree.known)
    assert tree.end(LADDER)
