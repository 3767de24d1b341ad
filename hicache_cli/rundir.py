"""The run directory: the only contract between the ranks, the dashboard and the report.

Layout: .hicache-run (the claim), config.json, rank-<N>.jsonl (samples), rank-<N>.log
(everything a rank printed), torchrun.log, report.json.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import time
from pathlib import Path
from typing import IO

from hicache_cli.errors import UsageError
from hicache_cli.files import (
    DIR_MODE,
    Refused,
    kind_of,
    make_dir,
    open_run_file,
    read_bytes,
    replace_file,
    resolve_output,
    run_file,
)
from hicache_cli.protocol import (
    CLAIM_FILE,
    CONFIG_FILE,
    LINK_FILE,
    LOGS_GLOB,
    PROGRAM_LOG,
    REPORT_FILE,
    SAMPLES_GLOB,
    STACKS_GLOB,
    STOP_FILE,
    TORCHRUN_LOG,
)

DEFAULT_ROOT = Path("hicache-runs")
# What an earlier run (or compare-policies, sglang-scan) leaves: never written over. Each is
# also a name a run writes, so one found there (a file, or a link another user planted in a
# shared --run-dir) refuses the directory before anything is written.
EARLIER_RUN = (
    CLAIM_FILE,
    CONFIG_FILE,
    REPORT_FILE,
    TORCHRUN_LOG,
    PROGRAM_LOG,
    STOP_FILE,
    LINK_FILE,
    "compare.json",
    "scan.json",
)
EARLIER_RUN_GLOBS = (SAMPLES_GLOB, LOGS_GLOB, STACKS_GLOB)


def create_run_dir(requested: Path | None, policy: str, *, private: bool = False) -> Path:
    """Make and claim a fresh run directory (default ./hicache-runs/<time>-<policy>/) or fail
    clearly. A directory made here is 0700 (less if the umask asks): the command line and the
    program's output are the user's alone.

    `private` (an attach, which may hand a part of it to another user's processes): the
    directory is one hicache makes itself, or an empty one of this user's that nobody else
    can write, in a place nobody else can rename it from (docs/security.md, "Attaching")."""
    made = requested is None or not os.path.lexists(requested)
    if requested is None:
        if private:
            _refuse_renamable(DEFAULT_ROOT / policy)
        path = _new_default_dir(policy)
    else:
        path = requested
        _refuse_foreign_links(path, f"--run-dir {path}")
        if (found := earlier_run(path)) is not None:
            raise UsageError(f"--run-dir {path} already holds a run ({found}); choose an empty or new directory")
        if private:
            _refuse_renamable(path)
            if not made:
                _refuse_shared_dir(path)
        exclusive = private and made  # made here, or refused: never one that appeared meanwhile
        try:
            make_dir(path, exist_ok=not exclusive)
        except OSError as exc:
            if exclusive and isinstance(exc, FileExistsError):
                raise UsageError(f"--run-dir {path} appeared while hicache made it; choose a new directory") from None
            raise UsageError(f"cannot write the run directory {path}: {exc.strerror or exc}") from None
    _claim(path, made)
    return path


def _refuse_shared_dir(path: Path) -> None:
    """An existing --run-dir for an attach: a directory (not a link to one) of this user's
    that no one else may write."""
    found = os.lstat(path)
    if not stat.S_ISDIR(found.st_mode):
        raise UsageError(f"--run-dir {path} is {kind_of(found.st_mode)}, not a directory hicache can use")
    if found.st_uid != os.geteuid():
        raise UsageError(
            f"--run-dir {path} belongs to another user (uid {found.st_uid}), who could replace what hicache "
            "writes there; name a new directory and hicache makes it"
        )
    if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UsageError(
            f"--run-dir {path} can be written by others ({stat.S_IMODE(found.st_mode):04o}); name a new "
            "directory and hicache makes it"
        )


def _refuse_renamable(path: Path) -> None:
    """A directory on the way that every user may write, without the sticky bit (which keeps
    them from renaming what is not theirs), would let anyone put another directory in the
    run directory's place while hicache works in it."""
    for directory in path.resolve().parents:
        try:
            found = os.stat(directory)
        except OSError:
            continue
        if found.st_mode & stat.S_IWOTH and not found.st_mode & stat.S_ISVTX:
            raise UsageError(
                f"cannot use {path}: {directory} can be written by every user without the sticky bit, so anyone "
                "could rename the run directory away; choose a directory of your own"
            )


def earlier_run(path: Path) -> str | None:
    """The first file of an earlier run that `path` holds, or None."""
    for name in EARLIER_RUN:
        if os.path.lexists(path / name):
            return name
    for pattern in EARLIER_RUN_GLOBS:
        if found := next(path.glob(pattern), None):
            return found.name
    return None


def _new_default_dir(policy: str) -> Path:
    """./hicache-runs/<time>-<policy>[-N]/, made with an exclusive mkdir: never one another run made."""
    _check_default_root()
    try:
        make_dir(DEFAULT_ROOT, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write the run directory {DEFAULT_ROOT}: {exc.strerror or exc}") from None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    suffix = 1
    while True:
        path = DEFAULT_ROOT / (f"{stamp}-{policy}" if suffix == 1 else f"{stamp}-{policy}-{suffix}")
        try:
            path.mkdir(mode=DIR_MODE)
            return path
        except FileExistsError:
            suffix += 1
        except OSError as exc:
            raise UsageError(f"cannot write the run directory {path}: {exc.strerror or exc}") from None


def _check_default_root() -> None:
    """./hicache-runs is followed only where another user could not have put it: not their
    symlink in a directory others can write, not a directory they own (its owner can rename
    the runs in it and put anything in their place). Root's is trusted, as root is."""
    _refuse_foreign_links(DEFAULT_ROOT, f"cannot use {DEFAULT_ROOT}")
    try:
        owner = os.stat(DEFAULT_ROOT).st_uid
    except OSError:
        return  # not there yet (made 0700 below), or not usable: the mkdir says why
    if owner not in (os.geteuid(), 0):
        raise UsageError(
            f"cannot use {DEFAULT_ROOT}: it belongs to another user (uid {owner}), who could replace what "
            "hicache writes there; choose a directory with --run-dir"
        )


def _refuse_foreign_links(path: Path, what: str) -> None:
    try:
        resolve_output(path)
    except Refused as exc:
        raise UsageError(f"{what}: {exc.filename} is {exc.strerror}") from None
    except OSError as exc:
        raise UsageError(f"{what}: {exc.strerror or exc}") from None


def _claim(path: Path, made: bool) -> None:
    """Create the claim file exclusively (it also proves the directory writable). A claim
    that cannot be written whole (a full disk) is taken back, with the directory if hicache
    made it, and said in one line."""
    try:
        fd = open_run_file(path / CLAIM_FILE, "new")
    except FileExistsError:
        raise UsageError(
            f"--run-dir {path} already holds a run ({CLAIM_FILE}: another hicache claimed it); "
            "choose an empty or new directory"
        ) from None
    except OSError as exc:
        _take_back(path, made)
        raise UsageError(f"cannot write the run directory {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(f"pid {os.getpid()} on {socket.gethostname()}, {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(path / CLAIM_FILE)
        _take_back(path, made)
        raise UsageError(f"cannot write the run directory {path}: {exc.strerror or exc}") from None


def _take_back(path: Path, made: bool) -> None:
    if made:
        with contextlib.suppress(OSError):
            os.rmdir(path)


def output_problem(path: Path) -> str | None:
    """Why write_atomically could not write `path`, or None: another user's symlink on the
    way (files.resolve_output), its directory is missing, or it names something other than
    a regular file (followed through the symlinks it may follow)."""
    try:
        target = resolve_output(path)
        mode = os.stat(target).st_mode
    except Refused as exc:
        return f"{exc.filename} is {exc.strerror}"
    except FileNotFoundError:
        return None if target.parent.is_dir() else f"directory {path.parent} does not exist"
    except OSError as exc:
        return str(exc.strerror or exc)
    if stat.S_ISREG(mode):
        return None
    return f"{kind_of(mode)}, not a regular file (hicache writes files whole, by replacing them)"


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write `data` (text goes as UTF-8) so that readers see the old file or the whole new one, never a part.

    A symlink is followed to the file it names, unless another user planted it in a
    directory others can write (refused: files.resolve_output); anything but a regular file
    (a device, a FIFO, a directory) is refused, never replaced: os.replace would put a file
    in its place. A file that exists keeps its mode; a new one is 0600 (less if the umask asks).
    """
    if (problem := output_problem(path)) is not None:
        raise UsageError(f"cannot write {path}: {problem}")
    try:
        target = resolve_output(path)
        try:
            mode: int | None = stat.S_IMODE(os.stat(target).st_mode) & 0o777
        except FileNotFoundError:
            mode = None
        replace_file(target, data.encode("utf-8") if isinstance(data, str) else data, mode)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def write_run_file(path: Path, data: str | bytes) -> None:
    """A run directory's file replaced whole (report.json, a rank's outcome): readers see the
    old file or the new one. The rename replaces the name itself: a symlink someone put there
    is replaced, never written through. Text goes as UTF-8."""
    try:
        replace_file(path, data.encode("utf-8") if isinstance(data, str) else data)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def open_run_log(path: Path) -> IO[bytes]:
    """A run directory's log opened for appending (torchrun.log, program.log), never through
    a symlink someone put there; one line (UsageError) when it cannot be."""
    try:
        return run_file(path, "append", binary=True)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def touch_run_file(path: Path) -> None:
    """Create a run directory's marker file (trace-stop, release, rank-N.started), never
    through a symlink. Raises OSError."""
    os.close(open_run_file(path, "append"))


def read_run_text(path: Path) -> str:
    """A run directory's text file (a log, a stack dump), never through a symlink, never a
    FIFO or device; undecodable bytes replaced. Raises OSError."""
    return read_bytes(path, follow=False).decode("utf-8", errors="replace")
