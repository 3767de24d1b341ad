"""Opening files so that no other local user decides where a write goes, and no read hangs.

Three kinds of path, three rules (docs/security.md):
- an output the user names (`-o`, `--report`, `--junit`): written whole through a temporary
  file created exclusively beside it, then renamed; a symlink is followed unless another user
  planted it where others can write (`foreign_symlink`, the rule `fs.protected_symlinks`
  enforces, checked here because many containers turn it off);
- a file of a run directory: never followed (O_NOFOLLOW), created exclusively where it must be
  new, refused when it is anything but this user's own single-link regular file;
- an input (a report, a baseline, a config): only a regular file is opened, and without
  blocking, so a FIFO or a device is refused before a read could hang.
Files are created 0600 and directories 0700, less where the umask asks. Stdlib only: ranks
and traced programs open their files through here too.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import IO, Literal

FILE_MODE = 0o600  # the umask can only take from these
DIR_MODE = 0o700

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symlink"),
)


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO")."""
    return next((name for test, name in _KINDS if test(mode)), "not a file")


class Refused(OSError):
    """The path names something hicache does not open: a FIFO, a device, a directory, a
    socket, a symlink where none is followed (or another user's, where they could plant it),
    another user's file or a hard link in a run directory. An OSError, so callers that
    already handle unreadable files handle it too; `strerror` says why in a few words."""

    def __init__(self, path: str | os.PathLike[str], why: str) -> None:
        super().__init__(errno.EINVAL, why, os.fspath(path))


def _refuse_unless_regular(path: str | os.PathLike[str], mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise Refused(path, f"{kind_of(mode)}, not a regular file")


# --- reading -----------------------------------------------------------------------------


def open_regular(
    path: str | os.PathLike[str], *, follow: bool = True, owners: Collection[int] | None = None
) -> IO[bytes]:
    """`path` opened for reading in binary, only if it is a regular file: its type is looked at
    before opening (opening some devices does something) and again on the open file
    (O_NONBLOCK, so a FIFO put there in between cannot block the open either).
    `follow=False` (a run directory's file): a symlink is refused, not followed.
    `owners` (a file another user's process wrote, an attached agent's): the open file must
    belong to one of these uids and have one link, so that a hard link planted there to some
    file of another user is never read on its behalf."""
    before = os.stat(path, follow_symlinks=follow).st_mode
    _refuse_unless_regular(path, before)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = _open(path, flags)
    try:
        found = os.fstat(fd)
        _refuse_unless_regular(path, found.st_mode)
        if owners is not None:
            _refuse_unless_owned(path, found, owners)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _refuse_unless_owned(path: str | os.PathLike[str], found: os.stat_result, owners: Collection[int]) -> None:
    if found.st_uid not in owners:
        raise Refused(path, f"a file of uid {found.st_uid}, not of the process that should have written it")
    if found.st_nlink != 1:
        raise Refused(path, f"a file with {found.st_nlink} hard links, not one written here")


def read_bytes(
    path: str | os.PathLike[str],
    *,
    follow: bool = True,
    limit: int | None = None,
    owners: Collection[int] | None = None,
) -> bytes:
    """The whole of a regular file (open_regular's checks); more than `limit` bytes is an
    OSError(EFBIG), said from the file's size before anything is read, never after a read
    that fills the memory."""
    with open_regular(path, follow=follow, owners=owners) as fh:
        if limit is not None and os.fstat(fh.fileno()).st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes", os.fspath(path))
        data = fh.read() if limit is None else fh.read(limit + 1)
    if limit is not None and len(data) > limit:  # it grew while read
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", os.fspath(path))
    return data


def append_regular(path: str | os.PathLike[str], data: bytes) -> None:
    """Append `data` to a file someone else names (GitHub's step summary): followed through
    symlinks, created if missing, but only ever a regular file, never blocking on a FIFO."""
    with contextlib.suppress(FileNotFoundError):
        _refuse_unless_regular(path, os.stat(path).st_mode)
    fd = _open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    try:
        _refuse_unless_regular(path, os.fstat(fd).st_mode)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "ab", closefd=False) as fh:
            fh.write(data)
    finally:
        os.close(fd)


# --- a run directory's files ---------------------------------------------------------------

RunFileMode = Literal["new", "append", "truncate"]
_WRITE_FLAGS = {
    "new": os.O_CREAT | os.O_EXCL,  # this run's own file: nothing may be there already
    "append": os.O_CREAT | os.O_APPEND,
    "truncate": os.O_CREAT,  # truncated only once it is known to be ours (below)
}


def open_run_file(path: str | os.PathLike[str], how: RunFileMode) -> int:
    """A file of a run directory opened for writing, as a descriptor: never through a symlink,
    never a FIFO or device, and, when it already exists, only this user's own file with one
    link (a hard link another user made to one of this user's files would otherwise be
    written through). Created FILE_MODE (less where the umask asks)."""
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | _WRITE_FLAGS[how]
    fd = _open(path, flags, FILE_MODE)
    try:
        found = os.fstat(fd)
        _refuse_unless_regular(path, found.st_mode)
        if found.st_uid != os.geteuid():
            raise Refused(path, f"a file of another user (uid {found.st_uid}), not this run's")
        if found.st_nlink != 1:
            raise Refused(path, f"a file with {found.st_nlink} hard links, not this run's")
        if how == "truncate":
            os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def run_file(path: str | os.PathLike[str], how: RunFileMode, *, binary: bool = False) -> IO:
    """open_run_file as a file object (text in UTF-8 unless `binary`)."""
    fd = open_run_file(path, how)
    if binary:
        return os.fdopen(fd, "ab" if how == "append" else "wb")
    return os.fdopen(fd, "a" if how == "append" else "w", encoding="utf-8")


def make_dir(path: Path, *, exist_ok: bool = False) -> None:
    """`path` made DIR_MODE (less where the umask asks); missing parents as `mkdir -p` makes them."""
    try:
        path.mkdir(mode=DIR_MODE, exist_ok=exist_ok)
    except FileNotFoundError:  # a parent is missing (a parent that is a file: ENOTDIR, raised)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=DIR_MODE, exist_ok=exist_ok)


def replace_file(path: Path, data: bytes, mode: int | None = None) -> None:
    """Put a file holding `data` at `path` in one rename: readers see the old file or the
    whole new one. The temporary file is made by mkstemp in the same directory (a fresh
    random name, O_EXCL, never through a symlink); the rename replaces whatever name was at
    `path` (a symlink itself, never what it points to). `mode`: the new file's (default
    FILE_MODE less the umask). Raises OSError; leaves no temporary file behind."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


# --- the symlink rule ----------------------------------------------------------------------


def protected(dir_mode: int, dir_uid: int, link_uid: int, me: int) -> bool:
    """fs.protected_symlinks's rule, widened to every directory others can write: a symlink
    in such a directory is followed only by its owner, or when the directory's owner owns it
    too (one who could replace the directory's entries anyway)."""
    shared = bool(dir_mode & (stat.S_ISVTX | stat.S_IWOTH))
    return shared and link_uid != me and link_uid != dir_uid


MAX_HOPS = 40  # the kernel's own limit on symlinks in one path walk


def resolve_output(path: Path, me: int | None = None) -> Path:
    """Where a write to `path` lands: every symlink on the way (any component, one hop at a
    time, as the kernel walks) followed unless `protected` says no, which raises Refused
    naming that link. Components that do not exist yet are kept as they are."""
    me = os.geteuid() if me is None else me
    where = Path.cwd()  # getcwd: already free of symlinks, like every `where` below
    parts = list(path.parts)
    hops = 0
    while parts:
        part = parts.pop(0)
        if os.path.isabs(part):  # the root: an absolute path, or a link to one
            where = Path(part)
            continue
        if part == "..":
            where = where.parent
            continue
        candidate = where / part
        try:
            link = os.lstat(candidate)
        except OSError:
            return Path(candidate, *parts)  # nothing there yet: nothing further to follow
        if not stat.S_ISLNK(link.st_mode):
            where = candidate
            continue
        directory = os.stat(where)
        if protected(directory.st_mode, directory.st_uid, link.st_uid, me):
            raise Refused(
                candidate,
                f"a symlink of another user (uid {link.st_uid}) in a directory others can write; "
                "hicache does not follow it",
            )
        hops += 1
        if hops > MAX_HOPS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
        parts = [*Path(os.readlink(candidate)).parts, *parts]
    return where


def _open(path: str | os.PathLike[str], flags: int, mode: int = 0o777) -> int:
    try:
        return os.open(path, flags, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP and flags & os.O_NOFOLLOW:
            raise Refused(path, "a symlink, which hicache does not follow in a run directory") from None
        if exc.errno == errno.ENXIO:  # a FIFO with no reader, or a socket
            raise Refused(path, f"{kind_of(os.lstat(path).st_mode)}, not a regular file") from None
        raise
