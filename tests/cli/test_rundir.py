"""rundir: making a fresh run directory, or refusing clearly."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hicache_cli.errors import UsageError
from hicache_cli.rundir import DEFAULT_ROOT, create_run_dir, write_atomically


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
        assert list((tmp_path / path).iterdir()) == []  # the write test leaves nothing behind


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
