"""Outputs on a shared machine: what another local user can plant beside a file hicache writes
(`-o /tmp/shared/r.sarif`) must not redirect the write, and a replaced file keeps its mode.

"Another user" is simulated: symlinks are planted by the test itself, and where ownership
matters the planted link is handed to another uid with os.lchown (root only; skipped
otherwise). The rule itself (files.protected) is checked as a pure function for everyone.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from hicache_cli.errors import UsageError
from hicache_cli.files import protected, resolve_output
from hicache_cli.rundir import output_problem, write_atomically

OTHER_UID = 54_321  # no such user needed: ownership is a number
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="handing a symlink to another uid needs root")


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A directory like /tmp: world-writable and sticky."""
    path = tmp_path / "shared"
    path.mkdir()
    path.chmod(0o1777)
    return path


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_temporary_names_planted_as_symlinks_are_never_followed(shared: Path, tmp_path: Path) -> None:
    """Was: the temporary file was `.NAME.PID.tmp`, opened following symlinks; links planted at
    the next pids' names made the write land in a file of the planter's choosing."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the victim's")
    for pid in range(max(1, os.getpid() - 50), os.getpid() + 50):
        (shared / f".r.sarif.{pid}.tmp").symlink_to(victim)
    out = shared / "r.sarif"
    write_atomically(out, "the report")
    assert victim.read_text() == "the victim's"
    assert not out.is_symlink() and out.read_text() == "the report"
    leftovers = {p.name for p in shared.iterdir()} - {"r.sarif"}
    assert all((shared / name).is_symlink() for name in leftovers)  # only the planted links, no temp file


def test_a_new_output_is_private_unless_the_umask_asks_for_less(tmp_path: Path, umask_022: None) -> None:
    out = tmp_path / "r.json"
    write_atomically(out, "{}")
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    os.umask(0o077)
    write_atomically(tmp_path / "s.json", "{}")
    assert stat.S_IMODE((tmp_path / "s.json").stat().st_mode) == 0o600
    os.umask(0o277)  # stricter than 0600: the umask wins
    write_atomically(tmp_path / "t.json", "{}")
    assert stat.S_IMODE((tmp_path / "t.json").stat().st_mode) == 0o400


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o644])
def test_replacing_a_file_keeps_its_mode(tmp_path: Path, umask_022: None, mode: int) -> None:
    """Was: a 0600 file came back 0644 (the temporary file's mode)."""
    out = tmp_path / "r.json"
    out.write_text("old")
    out.chmod(mode)
    write_atomically(out, "new")
    assert out.read_text() == "new"
    assert stat.S_IMODE(out.stat().st_mode) == mode


def test_replacing_through_ones_own_symlink_keeps_the_targets_mode(tmp_path: Path, umask_022: None) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    real.chmod(0o600)
    link = tmp_path / "r.json"
    link.symlink_to(real)
    write_atomically(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    assert stat.S_IMODE(real.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("dir_mode", "dir_uid", "link_uid", "followed"),
    [
        (0o1777, 0, 1001, False),  # /tmp: a symlink another user planted
        (0o0777, 0, 1001, False),  # world-writable without the sticky bit: worse, not better
        (0o1770, 0, 1001, False),  # sticky, writable by a group
        (0o1777, 0, 1000, True),  # one's own symlink
        (0o1777, 1001, 1001, True),  # the directory's owner's: it could replace the entry anyway
        (0o0755, 1001, 1001, True),  # another user's own directory: only they can write it
        (0o0775, 1001, 1002, True),  # group-writable, not sticky: the group is trusted
    ],
)
def test_the_protected_symlinks_rule(dir_mode: int, dir_uid: int, link_uid: int, followed: bool) -> None:
    assert protected(dir_mode, dir_uid, link_uid, me=1000) is not followed


def test_resolve_output_follows_every_hop_and_keeps_what_does_not_exist(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "a").symlink_to("real")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert resolve_output(tmp_path / "b" / "new" / "r.json") == tmp_path / "real" / "new" / "r.json"
    assert resolve_output(tmp_path / "b" / ".." / "x") == tmp_path / "x"  # `..` of the link's target


@root_only
def test_another_users_symlink_in_a_shared_directory_is_refused(shared: Path, tmp_path: Path) -> None:
    """Was: written through, replacing the file it points to and changing its mode."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the victim's")
    victim.chmod(0o600)
    out = shared / "r.sarif"
    out.symlink_to(victim)
    os.lchown(out, OTHER_UID, OTHER_UID)
    with pytest.raises(UsageError) as info:
        write_atomically(out, "the report")
    (line,) = str(info.value).splitlines()
    assert line == (
        f"cannot write {out}: {out} is a symlink of another user (uid {OTHER_UID}) in a directory others can "
        "write; hicache does not follow it"
    )
    assert victim.read_text() == "the victim's" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert out.is_symlink()


@root_only
def test_another_users_symlink_higher_up_the_path_is_refused(shared: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (shared / "dir").symlink_to(tmp_path / "elsewhere")
    os.lchown(shared / "dir", OTHER_UID, OTHER_UID)
    problem = output_problem(shared / "dir" / "r.json")
    assert problem is not None and problem.startswith(f"{shared / 'dir'} is a symlink of another user")
    with pytest.raises(UsageError):
        write_atomically(shared / "dir" / "r.json", "x")
    assert list((tmp_path / "elsewhere").iterdir()) == []


@root_only
def test_a_shared_directory_owners_symlink_is_followed(shared: Path, tmp_path: Path) -> None:
    """The rule's exception: /tmp is root's; root's own links in it are followed."""
    real = tmp_path / "real.json"
    real.write_text("old")
    shared.chmod(0o1777)
    os.chown(shared, OTHER_UID, OTHER_UID)
    (shared / "r.json").symlink_to(real)
    os.lchown(shared / "r.json", OTHER_UID, OTHER_UID)
    write_atomically(shared / "r.json", "new")
    assert real.read_text() == "new"
