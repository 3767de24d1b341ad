"""main: options that fail validation give one error line and exit 2, before any rank starts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.cli import running as run_commands
from hicache_cli.cli.main import main
from hicache_model.policies import POLICIES

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture(autouse=True)
def no_launch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fail the test if a command gets as far as launching ranks; keep any run directory in tmp_path."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the command tried to launch ranks")

    monkeypatch.setattr(run_commands, "execute", refuse)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")  # help text is wrapped to the terminal


def plain(text: str) -> str:
    return ANSI.sub("", text)


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["stress", "--pp", "0"], "--pp"),
        (["stress", "--tp", "-1"], "--tp"),
        (["stress", "--policy", "nope"], "--policy"),
        (["stress", "-p", "nope"], "--policy"),
        (["stress", "--workload", "heavy"], "--workload"),
        (["stress", "--duration", "abc"], "--duration"),
        (["stress", "--duration", "10s", "--warmup", "10s"], "--warmup"),
        (["stress", "--probe-hz", "500"], "--probe-hz"),
        (["stress", "--idle-fraction", "1.5"], "--idle-fraction"),
    ],
)
def test_bad_options_give_one_error_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], option: str
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"hicache: error: {option}")
    assert "Traceback" not in captured.err + captured.out
    assert list(tmp_path.iterdir()) == []  # refused before making a run directory


def test_report_into_a_missing_directory_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["stress", "--report", str(tmp_path / "missing" / "report.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hicache: error: --report")
    assert len(err.splitlines()) == 1


def test_a_run_dir_that_holds_a_run_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "rank-0.jsonl").write_text("")
    assert main(["stress", "--run-dir", str(tmp_path / "old")]) == 2
    assert capsys.readouterr().err.startswith("hicache: error: --run-dir")


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = plain(capsys.readouterr().out)
    assert "Usage: hicache" in out
    assert "stress" in out


def test_no_arguments_show_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2  # help, but as a usage error: nothing was asked for
    captured = capsys.readouterr()
    assert "stress" in plain(captured.out + captured.err)


def test_stress_help_lists_every_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stress", "--help"]) == 0
    out = plain(capsys.readouterr().out)
    assert "Usage: hicache stress" in out
    for name in POLICIES:
        assert name in out
    for option in ("--pp", "--tp", "--policy", "--duration", "--workload", "--run-dir", "--report", "--no-live"):
        assert option in out


def test_an_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bogus"]) == 2
    assert "Traceback" not in capsys.readouterr().err
