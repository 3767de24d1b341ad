"""The command line's own conventions: `--version`, shell completion as typer offers it, help
without typer's Python type markers, and the hicache version in every report."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest
import typer

from hicache_cli.analysis.results import Report
from hicache_cli.cli.conventions import plain_help
from hicache_cli.cli.main import app, main
from hicache_cli.config import StressConfig
from hicache_cli.outcome import RunOutcome
from hicache_cli.present.report_views import report_summary
from tests.conftest import build_pp2_run, report_json

# typer 0.29 writes each parameter's Python type: <bool>, <int>, <list[str]>, <path>, ...
TYPE_MARKER = re.compile(r"<(bool|int|float|str|path|Path|list\[[^\]]*\])>")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # help text is wrapped to the terminal


def command_paths() -> list[list[str]]:
    """Every command and subcommand, as the words that name it."""
    paths: list[list[str]] = [[]]
    root = typer.main.get_command(app)
    for name, command in root.commands.items():
        paths.append([name])
        paths += [[name, sub] for sub in getattr(command, "commands", {})]
    return paths


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"hicache {metadata.version('hicache')}\n"


@pytest.mark.parametrize("path", command_paths(), ids=lambda p: " ".join(p) or "hicache")
def test_help_has_no_type_markers(path: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*path, "--help"]) == 0
    out = ANSI.sub("", capsys.readouterr().out)
    assert "Usage: hicache" in out
    assert TYPE_MARKER.findall(out) == []
    assert re.search(r"\{[a-z_]+\}", out.splitlines()[1]) is None  # not typer's {run_dir}: {RUN_DIR}


def test_options_read_as_click_writes_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--help"]) == 0
    out = ANSI.sub("", capsys.readouterr().out)
    assert re.search(r"--pp +INTEGER ", out) and re.search(r"--max-p99-ms +FLOAT ", out)
    assert re.search(r"--junit +PATH ", out) and re.search(r"--fault +TEXT ", out)
    assert re.search(r"--no-live +Plain progress", out)  # a flag takes no value: nothing between


def test_plain_help_leaves_a_given_metavar() -> None:
    command = plain_help(typer.main.get_command(app))
    check = command.commands["check"]
    by_name = {p.name: p for p in check.params}
    assert by_name["command"].metavar == "-- COMMAND [ARGS]..."


def test_shell_completion_completes_commands_and_options(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("_HICACHE_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", "hicache st")
    monkeypatch.setenv("COMP_CWORD", "1")
    assert main([]) == 0
    assert capsys.readouterr().out.split() == ["stress"]
    monkeypatch.setenv("COMP_WORDS", "hicache check --max-d")
    monkeypatch.setenv("COMP_CWORD", "2")
    assert main([]) == 0
    assert capsys.readouterr().out.split() == ["--max-duration", "--max-depth"]


def test_install_completion_is_offered(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = ANSI.sub("", capsys.readouterr().out)
    assert "--install-completion" in out and "--show-completion" in out and "--version" in out


def test_every_report_names_the_hicache_that_wrote_it(tmp_path: Path) -> None:
    report = report_json(StressConfig(pp=2, duration_s=60.0), build_pp2_run(), RunOutcome(wall_s=61.0))
    version = metadata.version("hicache")
    assert report["environment"]["hicache_version"] == version
    assert Report.from_dict(report).environment.hicache_version == version
    assert f"hicache {version}, torch " in str(report_summary(Report.from_dict(report)).renderables[2])


def test_an_older_report_without_it_still_reads() -> None:
    report = report_json(StressConfig(pp=2, duration_s=60.0), build_pp2_run(), RunOutcome(wall_s=61.0))
    del report["environment"]["hicache_version"]
    assert Report.from_dict(report).environment.hicache_version is None
    assert str(report_summary(Report.from_dict(report)).renderables[2]).startswith("torch ")
