"""rundir: making a fresh run directory, or refusing clearly."""

from __future__ import annotations

import multiprocessing
import os
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.errors import UsageError
from hicache_cli.protocol import CLAIM_FILE
from hicache_cli.rundir import DEFAULT_ROOT, create_run_dir, output_problem, write_atomically


def test_default_run_dir_is_named_by_time_and_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "strftime", lambda fmt: "20250101-120000")
    first = create_run_dir(None, "reap")
    second = create_run_dir(None, "reap")  # the same second: a suffix, not the same directory
    third = create_run_dir(None, "reap")
    other = create_run_dir(None, "drain")
    assert first == DEFAULT_ROOT / "20250101-120000-reap"
    assert second == DEFAULT_ROOT / "20250101-120000-reap-2"
    assert third == DEFAULT_ROOT / "20250101-120000-reap-3"
    assert other == DEFAULT_ROOT / "20250101-120000-drain"
    for path in (first, second, third, other):
        assert (tmp_path / path).is_dir()
        assert [p.name for p in (tmp_path / path).iterdir()] == [CLAIM_FILE]  # the claim, nothing else


def test_default_name_uses_the_real_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = create_run_dir(None, "batched")
    assert path.parent == DEFAULT_ROOT
    assert path.name.endswith("-batched")
    time.strptime(path.name.removesuffix("-batched"), "%Y%m%d-%H%M%S")  # raises unless a time stamp


def test_a_requested_dir_is_created_with_its_parents(tmp_path: Path) -> None:
    path = create_run_dir(tmp_path / "a" / "b" / "run", "reap")
    assert path == tmp_path / "a" / "b" / "run"
    assert path.is_dir()


def test_an_existing_dir_without_a_run_is_reused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    assert create_run_dir(tmp_path, "reap") == tmp_path
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_dir_that_holds_a_run_is_refused(tmp_path: Path) -> None:
    (tmp_path / "rank-0.jsonl").write_text("")
    with pytest.raises(UsageError) as info:
        create_run_dir(tmp_path, "reap")
    message = str(info.value)
    assert message.startswith("--run-dir")
    assert "already holds a run" in message
    assert "\n" not in message
    assert (tmp_path / "rank-0.jsonl").exists()


@pytest.mark.parametrize("below", ["run", "deep/er/run"])
def test_an_unwritable_place_is_a_usage_error(tmp_path: Path, below: str) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("a regular file, so nothing can be made under it")
    with pytest.raises(UsageError) as info:
        create_run_dir(blocker / below, "reap")
    message = str(info.value)
    assert message.startswith("cannot write the run directory")
    assert str(blocker) in message
    assert "\n" not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no chained traceback


def test_a_requested_path_that_is_a_file_is_a_usage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    with pytest.raises(UsageError, match="cannot write the run directory"):
        create_run_dir(blocker, "reap")


def test_write_atomically_replaces_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text("old")
    write_atomically(path, "new\n")
    assert path.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


@pytest.mark.parametrize(
    "earlier",
    [
        "report.json",
        "config.json",
        "torchrun.log",
        "rank-3.log",
        "compare.json",
        "scan.json",
        CLAIM_FILE,
        "program.log",
        "trace-stop",
        "rank-0.stacks.txt",
        "node-link.json",
    ],
)
def test_a_dir_with_an_earlier_runs_files_is_refused_and_left_alone(tmp_path: Path, earlier: str) -> None:
    (tmp_path / earlier).write_text("the earlier run's")
    with pytest.raises(UsageError) as info:
        create_run_dir(tmp_path, "reap")
    assert str(info.value) == (
        f"--run-dir {tmp_path} already holds a run ({earlier}); choose an empty or new directory"
    )
    assert [p.name for p in tmp_path.iterdir()] == [earlier]
    assert (tmp_path / earlier).read_text() == "the earlier run's"


def test_a_dir_is_claimed_once(tmp_path: Path) -> None:
    run = create_run_dir(tmp_path / "run", "reap")
    assert (run / CLAIM_FILE).read_text().startswith(f"pid {os.getpid()} on ")
    with pytest.raises(UsageError, match="already holds a run"):
        create_run_dir(run, "reap")


def test_losing_the_claim_race_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another hicache claims the directory between this one's look and its claim."""
    from hicache_cli import rundir

    monkeypatch.setattr(rundir, "earlier_run", lambda path: (path / CLAIM_FILE).write_text("other") and None)
    with pytest.raises(UsageError) as info:
        create_run_dir(tmp_path, "reap")
    assert "another hicache claimed it" in str(info.value)
    assert (tmp_path / CLAIM_FILE).read_text() == "other"


def _claim_after(barrier: Any, path: Path, results: Any) -> None:
    barrier.wait()
    try:
        create_run_dir(path, "reap")
        results.put("claimed")
    except UsageError as exc:
        results.put(f"refused: {exc}")


@pytest.mark.slow
def test_two_processes_creating_one_run_dir_at_once_one_wins(tmp_path: Path) -> None:
    """Real processes released together by a barrier, twenty times: exactly one claims each directory."""
    ctx = multiprocessing.get_context("fork")
    for attempt in range(20):
        path = tmp_path / f"run-{attempt}" / ("deeper" if attempt % 2 else "")  # new, and already there
        if not attempt % 2:
            path.mkdir(parents=True)
        barrier, results = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_claim_after, args=(barrier, path, results)) for _ in range(2)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=30)
        outcomes = sorted(results.get(timeout=5) for _ in procs)
        assert outcomes[0] == "claimed", outcomes
        assert outcomes[1].startswith(f"refused: --run-dir {path} already holds a run"), outcomes


def test_write_atomically_leaves_no_temporary_file_when_it_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "report.json"
    path.write_text("old")

    def full(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(UsageError, match=f"^cannot write {path}: No space left on device$"):
        write_atomically(path, "new")
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]
    assert path.read_text() == "old"


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()  # the socket file stays


def _symlink_to_a_device(path: Path) -> None:
    path.symlink_to("/dev/null")  # only ever looked at: a write is refused before anything happens


@pytest.mark.parametrize(
    ("make", "kind", "is_it"),
    [
        (_fifo, "a FIFO", stat.S_ISFIFO),
        (_socket, "a socket", stat.S_ISSOCK),
        (_symlink_to_a_device, "a character device", stat.S_ISCHR),
        (Path.mkdir, "a directory", stat.S_ISDIR),
    ],
)
def test_write_atomically_never_replaces_what_is_not_a_regular_file(
    tmp_path: Path, make: Callable[[Path], None], kind: str, is_it: Callable[[int], bool]
) -> None:
    path = tmp_path / "report.json"
    make(path)
    before = os.lstat(path)
    assert output_problem(path) == f"{kind}, not a regular file (hicache writes files whole, by replacing them)"
    with pytest.raises(UsageError) as info:
        write_atomically(path, "{}")
    assert str(info.value).startswith(f"cannot write {path}: {kind}, not a regular file")
    after = os.lstat(path)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)  # the same node, untouched
    assert is_it(os.stat(path).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temporary file left


def test_write_atomically_writes_through_a_symlink_to_a_file(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "report.json"
    link.symlink_to(real)
    write_atomically(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_output_problem_of_a_missing_directory(tmp_path: Path) -> None:
    assert output_problem(tmp_path / "no" / "r.json") == f"directory {tmp_path / 'no'} does not exist"
    assert output_problem(tmp_path / "r.json") is None


OTHER_UID = 54_321  # another local user, as a number: no account needed
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="handing a file to another uid needs root")


@pytest.fixture
def umask_022() -> Any:
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_run_directories_are_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask_022: None) -> None:
    """Was 0755 and 0644: the command line and the program's output readable by every local user."""
    monkeypatch.chdir(tmp_path)
    default = create_run_dir(None, "reap")
    requested = create_run_dir(tmp_path / "a" / "run", "reap")
    assert (_mode(DEFAULT_ROOT), _mode(default), _mode(requested)) == (0o700, 0o700, 0o700)
    assert _mode(default / CLAIM_FILE) == _mode(requested / CLAIM_FILE) == 0o600
    assert _mode(tmp_path / "a") == 0o755  # a parent is made as `mkdir -p` makes it


def test_an_existing_run_dir_keeps_its_mode(tmp_path: Path, umask_022: None) -> None:
    tmp_path.chmod(0o750)
    create_run_dir(tmp_path, "reap")
    assert _mode(tmp_path) == 0o750  # the user's own directory: not hicache's to change


def test_a_stricter_umask_wins(tmp_path: Path) -> None:
    old = os.umask(0o277)
    try:
        run = create_run_dir(tmp_path / "run", "reap")
    finally:
        os.umask(old)
    assert _mode(run) == 0o500 and _mode(run / CLAIM_FILE) == 0o400


@pytest.fixture
def shared_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory is like /tmp: world-writable and sticky."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.chdir(shared)
    return shared


@root_only
def test_a_default_root_that_is_another_users_symlink_is_not_followed(shared_cwd: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (shared_cwd / DEFAULT_ROOT).symlink_to(elsewhere)
    os.lchown(shared_cwd / DEFAULT_ROOT, OTHER_UID, OTHER_UID)
    with pytest.raises(UsageError) as info:
        create_run_dir(None, "reap")
    (line,) = str(info.value).splitlines()
    assert line.startswith(f"cannot use {DEFAULT_ROOT}: {shared_cwd / DEFAULT_ROOT} is a symlink of another user")
    assert list(elsewhere.iterdir()) == []


@root_only
def test_a_default_root_another_user_owns_is_refused(shared_cwd: Path) -> None:
    (shared_cwd / DEFAULT_ROOT).mkdir(mode=0o777)
    os.chown(shared_cwd / DEFAULT_ROOT, OTHER_UID, OTHER_UID)
    with pytest.raises(UsageError, match=f"^cannot use {DEFAULT_ROOT}: it belongs to another user .uid {OTHER_UID}."):
        create_run_dir(None, "reap")
    assert list((shared_cwd / DEFAULT_ROOT).iterdir()) == []


@root_only
def test_a_run_dir_through_another_users_symlink_is_refused(shared_cwd: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (shared_cwd / "runs").symlink_to(elsewhere)
    os.lchown(shared_cwd / "runs", OTHER_UID, OTHER_UID)
    with pytest.raises(UsageError, match=r"^--run-dir runs/one: .* is a symlink of another user"):
        create_run_dir(Path("runs/one"), "reap")
    assert list(elsewhere.iterdir()) == []


# -- an attach's run directory (private): made by hicache, or an empty one only its user writes --


def test_a_private_run_dir_is_made_or_taken_only_when_nobody_else_could_write_it(tmp_path: Path) -> None:
    made = create_run_dir(tmp_path / "new" / "run", "attach", private=True)
    assert stat.S_IMODE(os.stat(made).st_mode) & 0o077 == 0
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    assert create_run_dir(empty, "attach", private=True) == empty  # the user's own, nobody else writes it
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o770)
    with pytest.raises(UsageError, match=r"can be written by others \(0770\); name a new directory"):
        create_run_dir(shared, "attach", private=True)
    assert create_run_dir(shared, "stress") == shared  # a run of one's own processes takes it, as before
    link = tmp_path / "link"
    link.symlink_to(empty)
    with pytest.raises(UsageError, match="already holds a run"):
        create_run_dir(link, "attach", private=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a directory to another user")
def test_a_private_run_dir_of_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 1, 1)
    with pytest.raises(UsageError, match=r"belongs to another user \(uid 1\)"):
        create_run_dir(theirs, "attach", private=True)
    assert list(theirs.iterdir()) == []


def test_a_private_run_dir_below_a_directory_anyone_may_rename_it_from_is_refused(tmp_path: Path) -> None:
    drop = tmp_path / "drop"
    drop.mkdir()
    os.chmod(drop, 0o777)  # no sticky bit: anyone may rename what is in it
    with pytest.raises(UsageError, match=r"drop can be written by every user without the sticky bit"):
        create_run_dir(drop / "run", "attach", private=True)
    assert list(drop.iterdir()) == []  # refused before anything was made
    os.chmod(drop, 0o1777)  # /tmp's way: only the owner renames its own entries
    assert create_run_dir(drop / "run", "attach", private=True).is_dir()
