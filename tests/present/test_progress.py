"""progress: plain progress lines and the final summary table."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
from rich.console import Console

from hicache_cli.analysis.report import build_report
from hicache_cli.config import StressConfig
from hicache_cli.outcome import RunOutcome
from hicache_cli.present.progress import PlainProgress, progress_line, summary_table, verdict_lines
from hicache_cli.sample import Sample

MakeSample = Callable[..., Sample]
MakeSeries = Callable[..., list[Sample]]


def render(renderable: Any) -> str:
    console = Console(file=io.StringIO(), width=160, force_terminal=True, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def drive(progress: PlainProgress, lines: list[str], series: dict[int, list[Sample]]) -> list[float]:
    """Feed the samples in as they would arrive; return the run times at which a line went to `lines`."""
    written: list[float] = []
    n = max(len(s) for s in series.values())
    for i in range(n):
        seen = {r: s[: i + 1] for r, s in series.items()}
        before = len(lines)
        run_t = max(s[-1].t for s in seen.values())
        progress(seen, run_t + 0.5)  # launch time runs a little ahead
        if len(lines) > before:
            written.append(run_t)
    return written


def test_at_most_one_line_per_interval_of_run_time(make_series: MakeSeries) -> None:
    lines: list[str] = []
    progress = PlainProgress(duration_s=10.0, interval_s=2.0, write=lines.append)
    written = drive(progress, lines, {0: make_series(0, n=100), 1: make_series(1, n=100)})

    assert written[0] == pytest.approx(0.1)  # the first sample is shown at once
    gaps = [b - a for a, b in zip(written[:-1], written[1:-1], strict=False)]
    assert all(gap >= 2.0 - 1e-9 for gap in gaps)
    assert 4 <= len(written) - 1 <= 5  # and it keeps going: 10 s of run time at one line per 2 s
    assert len(lines) == len(written)
    assert written[-1] == pytest.approx(10.0) and "[done]" in lines[-1]  # and the ranks' end, whenever it comes
    assert "[done]" not in lines[-2]


def test_progress_lines_are_plain_single_lines(make_series: MakeSeries) -> None:
    lines: list[str] = []
    drive(
        PlainProgress(10.0, write=lines.append),
        lines,
        {0: make_series(0, n=50, depth_per_s=100), 1: make_series(1, n=50)},
    )
    assert lines
    for line in lines:
        assert "\x1b" not in line
        assert "\n" not in line
        assert "r0 " in line and "r1 " in line


def test_progress_line_content(make_sample: MakeSample) -> None:
    latest = {
        1: make_sample(rank=1, t=4.0, rss_bytes=None, depth=0, rounds=10, state="stopping"),
        0: make_sample(rank=0, t=4.2, rss_bytes=3 * 1024**2, depth=4200, rounds=4200),
    }
    line = progress_line(latest, duration_s=15.0)
    assert line == "[  4.2s / 15.0s] r0 3.0 MiB depth 4200 rounds 4200 | r1 n/a depth 0 rounds 10 [stopping]"


def test_starting_lines_follow_elapsed_time_until_samples_arrive() -> None:
    lines: list[str] = []
    progress = PlainProgress(10.0, interval_s=2.0, write=lines.append)
    for tenth in range(0, 50):
        progress({0: [], 1: []}, tenth / 10)
    assert len(lines) == 3  # at 0, 2 and 4 s
    assert all("starting ranks" in line for line in lines)


def test_the_first_sample_after_a_slow_start_is_shown(make_sample: MakeSample) -> None:
    lines: list[str] = []
    progress = PlainProgress(15.0, interval_s=2.0, write=lines.append)
    for second in range(0, 11):  # torchrun and the ranks' set-up take 10 s
        progress({0: []}, float(second))
    starting = len(lines)
    progress({0: [make_sample(t=0.5)]}, 10.5)
    assert len(lines) == starting + 1
    assert "r0 " in lines[-1]


@pytest.fixture
def report(make_series: MakeSeries) -> dict[str, Any]:
    samples = {
        0: make_series(0, rss_per_s=50_000, depth_per_s=1000, sent_per_s=1000),
        1: make_series(1, received_per_s=990, final=False),
    }
    return build_report(StressConfig(pp=3, duration_s=60.0), samples, RunOutcome())


def test_summary_table_shows_every_rank_and_the_verdict(report: dict[str, Any]) -> None:
    text = render(summary_table(report))
    assert "reap" in text
    assert "pp=3 tp=1" in text
    assert "status=failed" in text
    assert "verdict=LEAK" in text
    rows = [line for line in text.splitlines() if "LEAK" in line or "BOUNDED" in line or "INCONCLUSIVE" in line]
    assert len(rows) == 4  # the title and three ranks
    assert any(" 0 " in row and "LEAK" in row and "+180 [" in row for row in rows)
    assert any(" 1 " in row and "BOUNDED" in row for row in rows)
    assert any(" 2 " in row and "INCONCLUSIVE" in row and "n/a" in row for row in rows)
    assert "60000/60000" in text  # rank 0's work list, max/final


def test_summary_table_for_a_run_without_samples() -> None:
    report = build_report(StressConfig(pp=2), {}, RunOutcome())
    text = render(summary_table(report))
    assert "verdict=INCONCLUSIVE" in text
    assert text.count("INCONCLUSIVE") == 3  # the title and both ranks


def test_verdict_lines(report: dict[str, Any]) -> None:
    lines = verdict_lines(report)
    assert lines[0].startswith("rank 0: LEAK - work list grows")
    assert lines[1].startswith("rank 1: BOUNDED - RSS")
    assert lines[2] == "rank 2: INCONCLUSIVE - the rank wrote no samples"
    assert lines[3:] == [  # earliest first: the root cause leads
        "failure: rank 2 crash: the rank never started its workload (see its log)",
        "failure: rank 1 crash: the rank ended without its final line (see its log)",
    ]
