"""Every command that reads a file hicache wrote is total over what it finds there (issue 30,
items 7 and 8): any bytes, a FIFO, a device or a directory in a file's place give one line
and exit 2, never a traceback and never a hang. Each case names what it did before."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from hicache_cli.cli.main import main
from hicache_cli.config import StressConfig
from tests.cli.test_watch import write_run

DEEP = "[" * 200_000  # was: RecursionError, exit 1 (for check --baseline, exit 1 reads as the gate's FAIL)


def one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    (line,) = captured.err.splitlines()
    assert line.startswith("hicache: error: ")
    return line


READERS: dict[str, Callable[[Path], list[str]]] = {
    "report show": lambda path: ["report", "show", str(path)],
    "report diff": lambda path: ["report", "diff", str(path), str(path)],
    "report plot": lambda path: ["report", "plot", str(path), "--output", str(path.parent / "p.png")],
    "check --baseline": lambda path: ["check", "--baseline", str(path)],
}


def _deep(path: Path) -> None:
    path.write_text(DEEP)


PLACED: dict[str, tuple[Callable[[Path], None], str]] = {
    "JSON nested 200,000 deep": (_deep, "JSON nested too deeply"),
    "a FIFO": (os.mkfifo, "a FIFO, not a regular file"),  # was: blocked until a writer came
    "a symlink to a device": (lambda path: path.symlink_to("/dev/null"), "a character device, not a regular file"),
}


@pytest.mark.parametrize("what", PLACED)
@pytest.mark.parametrize("reader", READERS)
def test_every_report_reader_refuses_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_hang: None, fake_execute: object, reader: str, what: str
) -> None:
    if reader == "report plot":
        pytest.importorskip("matplotlib")
    path = tmp_path / "report.json"
    make, says = PLACED[what]
    make(path)
    line = one_line(READERS[reader](path), capsys)
    assert str(path) in line and says in line


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "not a hicache run's config (Expecting property name"),
        ("[]", "not a hicache run's config (a JSON list, not an object)"),  # was: AttributeError
        ('{"no_such_field": 1, "faults": 3}', "not a hicache run's config ("),  # was: TypeError
        (DEEP, "not a hicache run's config (maximum recursion depth"),
    ],
)
def test_watch_on_a_config_that_is_none(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make_pp2_run,
    text: str,
    says: str,  # noqa: ANN001
) -> None:
    """Was: a corrupt or `[]` config.json crashed watch with a traceback, exit 1."""
    run_dir = write_run(tmp_path / "run", make_pp2_run())
    (run_dir / "config.json").write_text(text)
    line = one_line(["watch", str(run_dir), "--no-live"], capsys)
    assert line.startswith(f"hicache: error: {run_dir / 'config.json'}: {says}")


def test_watch_on_a_config_that_is_a_fifo(tmp_path: Path, capsys: pytest.CaptureFixture[str], no_hang: None) -> None:
    (tmp_path / "config.json").unlink(missing_ok=True)
    os.mkfifo(tmp_path / "config.json")
    line = one_line(["watch", str(tmp_path), "--no-live"], capsys)
    assert line.endswith("cannot read it: a FIFO, not a regular file")


@pytest.mark.parametrize(("make", "why"), [(Path.mkdir, "a directory"), (os.mkfifo, "a FIFO")])
def test_watch_on_a_rank_file_that_is_not_a_file(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_hang: None,
    make,
    why: str,  # noqa: ANN001
) -> None:
    """Was: a directory named rank-9.jsonl crashed watch (IsADirectoryError, exit 1); a FIFO hung it."""
    tmp_path.joinpath("run").mkdir()
    StressConfig(pp=2, duration_s=60.0).save(tmp_path / "run")
    make(tmp_path / "run" / "rank-9.jsonl")
    line = one_line(["watch", str(tmp_path / "run"), "--no-live"], capsys)
    assert line.endswith(f"rank-9.jsonl: cannot read it as a rank's samples: {why}, not a regular file")


def test_the_api_reads_reports_as_the_commands_do(tmp_path: Path, no_hang: None) -> None:
    """hc.load_report: the same one-line UsageError, never a RecursionError or a hang."""
    import hicache_cli
    from hicache_cli.errors import UsageError

    for name, (make, says) in PLACED.items():
        path = tmp_path / f"{len(name)}.json"
        make(path)
        with pytest.raises(UsageError, match=says):
            hicache_cli.load_report(path)
