"""Output off a terminal (a CI log, a pipe): lines are never wrapped, unless the user sets a
width (COLUMNS); tables are laid out as wide as they need."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hicache_cli.analysis.report import build_report
from hicache_cli.config import StressConfig
from hicache_cli.outcome import RunOutcome
from hicache_cli.present.progress import PlainProgress, make_console, summary_table, verdict_lines
from hicache_cli.records import replace
from hicache_cli.sample import Sample

PP8 = StressConfig(pp=8, policy="reap", duration_s=60.0)


@pytest.fixture
def pp8_run(make_series: Callable[..., list[Sample]]) -> dict[int, list[Sample]]:
    """Eight stages; every one but the last keeps its sends (long depths make long lines)."""
    return {r: make_series(r, n=100, depth_per_s=5000.0 if r < 7 else 0.0, rss_per_s=80_000.0) for r in range(8)}


def test_a_pp8_progress_line_is_one_line(
    pp8_run: dict[int, list[Sample]], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    console = make_console(live=False)
    PlainProgress(PP8.duration_s, write=console.print)(pp8_run, 11.0)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    assert len(lines[0]) > 300  # far past 80 or 160 columns, whole
    assert lines[0].count(" depth ") == 8 and lines[0].endswith(
        f"r7 96.1 MiB depth 0 rounds {pp8_run[7][-1].rounds} [done]"
    )


def test_long_reasons_and_the_table_are_never_cut(
    pp8_run: dict[int, list[Sample]], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    report = build_report(PP8, pp8_run, RunOutcome(wall_s=12.0))
    long_reason = report.ranks[0].verdict_reason + "; " + "a reason that goes on " * 10
    report = replace(report, ranks=[replace(report.ranks[0], verdict_reason=long_reason), *report.ranks[1:]])
    console = make_console(live=False)
    console.print(summary_table(report, console.width))
    for line in verdict_lines(report):
        console.print(line)
    out = capsys.readouterr().out
    assert "…" not in out  # no cell was cut
    assert "p50/p99/max ms" in out and "RSS end" in out  # the wide layout
    reasons = [line for line in out.splitlines() if line.startswith("rank ") and ": " in line]
    assert len(reasons) == 8  # one line each
    assert reasons[0].endswith("a reason that goes on ")


def test_a_width_the_user_sets_is_kept(
    pp8_run: dict[int, list[Sample]], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    console = make_console(live=False)
    assert console.width == 100
    PlainProgress(PP8.duration_s, write=console.print)(pp8_run, 11.0)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 1 and all(len(line) <= 100 for line in lines)


def test_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    make_console(live=False, to_stderr=True).print("on stderr")
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "on stderr\n")
