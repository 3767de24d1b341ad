"""A run directory's files are opened without following links: a --run-dir that another local
user can write (their directory, a shared one) must not let them redirect what hicache, its
ranks or a traced program write (issue 30, item 3), and no read of one may hang.

Links are planted by the test itself; a file "of another user" is made with os.chown (root
only, skipped otherwise). Every open that could block is bounded by an alarm, so a
regression fails instead of hanging the suite.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from hicache_cli.config import StressConfig
from hicache_cli.errors import UsageError
from hicache_cli.files import Refused, open_regular, open_run_file, read_bytes, run_file
from hicache_cli.protocol import CONFIG_FILE, sample_files
from hicache_cli.rundir import touch_run_file, write_run_file
from hicache_cli.sample import LineTail
from hicache_cli.tracer.session import claim_rank_file

OTHER_UID = 54_321


@pytest.fixture(autouse=True)
def _bounded(no_hang: None) -> None:
    """Every test here opens what could block: bounded (conftest.no_hang)."""


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of the user running hicache, which a planted link points at."""
    path = tmp_path / "victim"
    path.write_text("the victim's\n")
    return path


@pytest.fixture
def run(tmp_path: Path) -> Path:
    path = tmp_path / "run"
    path.mkdir()
    return path


@pytest.mark.parametrize("how", ["new", "append", "truncate"])
def test_a_planted_symlink_is_never_written_through(run: Path, victim: Path, how: str) -> None:
    (run / "program.log").symlink_to(victim)
    with pytest.raises(OSError):
        open_run_file(run / "program.log", how)  # type: ignore[arg-type]
    assert victim.read_text() == "the victim's\n"


def test_a_planted_symlink_to_a_missing_file_creates_nothing(run: Path, tmp_path: Path) -> None:
    """Was: `trace-stop`'s touch() followed the link and created the file it named."""
    target = tmp_path / "not-there"
    (run / "trace-stop").symlink_to(target)
    with pytest.raises(Refused, match="a symlink"):
        touch_run_file(run / "trace-stop")
    assert not os.path.lexists(target)


def test_a_hard_link_to_another_file_is_refused_and_not_truncated(run: Path, victim: Path) -> None:
    os.link(victim, run / "rank-0.stacks.txt")
    for how in ("append", "truncate"):
        with pytest.raises(Refused, match="2 hard links"):
            open_run_file(run / "rank-0.stacks.txt", how)  # type: ignore[arg-type]
    assert victim.read_text() == "the victim's\n"


@pytest.mark.parametrize("how", ["append", "truncate"])
def test_a_fifo_is_refused_without_blocking(run: Path, how: str) -> None:
    os.mkfifo(run / "torchrun.log")
    with pytest.raises(Refused, match="a FIFO"):
        open_run_file(run / "torchrun.log", how)  # type: ignore[arg-type]


@pytest.mark.skipif(os.geteuid() != 0, reason="a file of another uid needs root to make")
def test_a_file_another_user_put_there_is_refused(run: Path) -> None:
    planted = run / "torchrun.log"
    planted.write_text("theirs")
    os.chown(planted, OTHER_UID, OTHER_UID)
    with pytest.raises(Refused, match=f"another user .uid {OTHER_UID}."):
        open_run_file(planted, "append")
    assert planted.read_text() == "theirs"


def test_run_files_are_private(run: Path) -> None:
    old = os.umask(0o022)
    try:
        with run_file(run / "rank-0.log", "append") as fh:
            fh.write("x")
        write_run_file(run / "report.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((run / "rank-0.log").stat().st_mode) == 0o600
    assert stat.S_IMODE((run / "report.json").stat().st_mode) == 0o600


def test_a_run_file_replaced_whole_replaces_a_planted_link_not_its_target(run: Path, victim: Path) -> None:
    (run / "report.json").symlink_to(victim)
    write_run_file(run / "report.json", "{}")
    assert victim.read_text() == "the victim's\n"
    assert not (run / "report.json").is_symlink() and (run / "report.json").read_text() == "{}"


def test_config_json_is_never_written_through_a_link(run: Path, victim: Path) -> None:
    (run / CONFIG_FILE).symlink_to(victim)
    with pytest.raises(UsageError, match=f"^cannot write {run / CONFIG_FILE}: File exists$"):
        StressConfig().save(run)
    assert victim.read_text() == "the victim's\n"


def test_a_traced_process_skips_a_rank_file_someone_planted(run: Path, victim: Path) -> None:
    (run / "rank-0.jsonl").symlink_to(victim)
    slot, fh = claim_rank_file(run, rank=0, world_size=2)
    with fh:
        fh.write("line\n")
    assert slot == 2
    assert victim.read_text() == "the victim's\n"


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (Path.mkdir, "a directory"),
        (os.mkfifo, "a FIFO"),
        (lambda path: path.symlink_to("/dev/null"), "a symlink"),
    ],
)
def test_a_rank_file_that_is_not_a_file_is_one_line(run: Path, make, why: str) -> None:  # noqa: ANN001
    """Was: `hicache watch` on a directory named rank-9.jsonl crashed (IsADirectoryError,
    exit 1); a FIFO hung it."""
    make(run / "rank-9.jsonl")
    with pytest.raises(UsageError) as info:
        LineTail(run).poll()
    (line,) = str(info.value).splitlines()
    assert line.startswith(f"{run / 'rank-9.jsonl'}: cannot read it as a rank's samples: {why}")


def test_rank_files_are_named_by_a_number(run: Path) -> None:
    """Was: rank-x.jsonl raised ValueError from every reader of the run directory."""
    for name in ("rank-0.jsonl", "rank-x.jsonl", "rank-.jsonl", "rank-\u0663.jsonl"):
        (run / name).write_text("")
    assert sample_files(run) == {0: run / "rank-0.jsonl"}


@pytest.mark.parametrize("follow", [True, False])
def test_reading_refuses_what_is_not_a_regular_file(run: Path, follow: bool) -> None:
    os.mkfifo(run / "fifo")
    (run / "dir").mkdir()
    (run / "dev").symlink_to("/dev/zero")
    for name, why in (
        ("fifo", "a FIFO"),
        ("dir", "a directory"),
        ("dev", "a character device" if follow else "a symlink"),
    ):
        with pytest.raises(Refused, match=f"^.*{why}, not a regular file"):
            read_bytes(run / name, follow=follow)


def test_reading_through_a_link_only_when_asked(run: Path, victim: Path) -> None:
    (run / "link").symlink_to(victim)
    with open_regular(run / "link") as fh:
        assert fh.read() == b"the victim's\n"
    with pytest.raises(Refused, match="a symlink"):
        open_regular(run / "link", follow=False)


def test_reading_more_than_the_limit_is_refused(run: Path) -> None:
    (run / "big").write_bytes(b"x" * 101)
    assert read_bytes(run / "big", limit=101) == b"x" * 101
    with pytest.raises(OSError, match="larger than 100 bytes"):
        read_bytes(run / "big", limit=100)


def test_a_traced_programs_log_is_never_written_through_a_link(
    run: Path, victim: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: `--run-dir` in a directory another user can write followed a planted program.log:
    the program's output was appended to a file of their choosing. Planted after hicache
    looked for an earlier run's files (found there, it refuses the directory outright)."""
    import hicache_cli
    from hicache_cli import rundir

    def plant(path: Path) -> None:
        (path / "program.log").symlink_to(victim)

    monkeypatch.setattr(rundir, "earlier_run", plant)
    with pytest.raises(UsageError, match=f"^cannot write {run / 'program.log'}: a symlink"):
        hicache_cli.trace([sys.executable, "-c", "print('output')"], run_dir=run, capture_output=True)
    assert victim.read_text() == "the victim's\n"
