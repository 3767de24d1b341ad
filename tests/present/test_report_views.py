"""report_views: one report's summary, two reports' diff; and the `report show` and `report diff` commands."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from hicache_cli.analysis.report import build_report, write_report
from hicache_cli.analysis.results import Environment, RankReport, Report
from hicache_cli.cli.main import main
from hicache_cli.config import StressConfig
from hicache_cli.outcome import RunOutcome
from hicache_cli.present.progress import summary_table
from hicache_cli.present.report_views import diff_ranks, report_diff, report_summary, run_line
from hicache_cli.records import replace
from hicache_cli.sample import Sample

MakeSeries = Callable[..., list[Sample]]
MakeReport = Callable[..., Report]


def render(renderable: Any, width: int = 160) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def words(text: str) -> str:
    """Whitespace collapsed, so text rich wrapped compares equal to the unwrapped."""
    return " ".join(text.split())


@pytest.fixture
def leaking(make_pp2_report: MakeReport) -> Report:
    return make_pp2_report(leaking=True)


@pytest.fixture
def bounded(make_pp2_report: MakeReport) -> Report:
    """The fix: both ranks flat, at half the rounds per second."""
    return make_pp2_report(leaking=False, rounds_per_s=500.0)


@pytest.fixture
def three_stages(make_series: MakeSeries) -> Report:
    """pp=3, one rank more than the pp=2 reports; its stage 0 leaks twice as fast."""
    samples = {
        0: make_series(0, rss_per_s=100_000, depth_per_s=2000, sent_per_s=2000),
        1: make_series(1, received_per_s=2000, sent_per_s=2000),
        2: make_series(2, received_per_s=2000),
    }
    return build_report(StressConfig(pp=3, duration_s=60.0), samples, RunOutcome())


# -- one report ----------------------------------------------------------------------


def test_run_line(leaking: Report) -> None:
    assert run_line(leaking) == "reap pp=2 tp=1 60s, completed, LEAK"


@pytest.mark.parametrize("width", [80, 160])
def test_report_summary(leaking: Report, width: int) -> None:
    text = render(report_summary(leaking, width), width)
    assert "hicache report (schema 1): reap pp=2 tp=1 60s, completed, LEAK" in text
    assert "status=completed" in text
    assert "verdict=LEAK" in text
    assert "workload mixed, seed 0, warm-up auto, threshold 100 MB/h" in text  # no warm-up given: per rank
    assert "wall 61.5s" in text
    for rank in leaking.ranks:
        line = f"rank {rank.rank}: {rank.verdict} - {rank.verdict_reason}"
        assert words(line) in words(text)
    assert "failure" not in text

    fixed = replace(leaking, config=replace(leaking.config, warmup_s=10.0))  # a warm-up the user gave
    assert "workload mixed, seed 0, warm-up 10s, threshold 100 MB/h" in render(report_summary(fixed, width), width)


def test_report_summary_lists_the_failures(make_series: MakeSeries) -> None:
    samples = {0: make_series(0), 1: make_series(1, final_state="error", message="RuntimeError: peer went away")}
    report = build_report(StressConfig(pp=2, duration_s=60.0), samples, RunOutcome())
    text = render(report_summary(report))
    assert "status=failed" in text
    assert "failure: rank 1 error: RuntimeError: peer went away" in text


def test_report_summary_without_environment_details(leaking: Report) -> None:
    """A report from a machine that lacked an environment key still shows."""
    report = replace(leaking, environment=Environment(), wall_s=None)
    text = render(report_summary(report))
    assert "torch None, None/None" in text
    assert "wall 0s" in text


@pytest.mark.parametrize("width", [80, 160])
def test_summary_table_shows_every_rank_within_the_width(three_stages: Report, width: int) -> None:
    text = render(summary_table(three_stages, width), width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "verdict=LEAK" in text
    rows = {int(line.split()[0]): line for line in text.splitlines()[2:] if line.strip()}
    assert sorted(rows) == [0, 1, 2]
    for rank in three_stages.ranks:
        assert rank.verdict in rows[rank.rank]
    assert ("RSS end" in text) == (width >= 110)


# -- two reports ---------------------------------------------------------------------


def test_diff_pairs_ranks_by_number(leaking: Report, bounded: Report) -> None:
    shuffled = replace(bounded, ranks=list(reversed(bounded.ranks)))
    diffs = diff_ranks(leaking, shuffled)
    assert [d.rank for d in diffs] == [0, 1]
    first = diffs[0]
    assert (first.verdict_a, first.verdict_b) == ("LEAK", "BOUNDED")
    assert (first.depth_a, first.depth_b) == (60_000, 0)
    assert (first.slope_a, first.slope_b) == (pytest.approx(180.0), pytest.approx(0.0))
    assert (first.rps_a, first.rps_b) == (1000.0, 500.0)
    assert first.rss_end_a == leaking.ranks[0].rss.end_bytes
    assert first.rss_end_b == bounded.ranks[0].rss.end_bytes
    assert first.p99_a == leaking.ranks[0].loop_latency.p99


def test_a_rank_only_one_report_has_is_paired_with_nothing(leaking: Report, three_stages: Report) -> None:
    extra = diff_ranks(leaking, three_stages)[2]
    assert extra.rank == 2
    assert extra.verdict_a == "-"
    assert (extra.slope_a, extra.depth_a, extra.p99_a, extra.rps_a, extra.rss_end_a) == (None,) * 5
    assert extra.verdict_b == three_stages.ranks[2].verdict
    assert extra.rps_b == three_stages.ranks[2].rounds_per_s
    assert extra.depth_b == 0

    reverse = diff_ranks(three_stages, leaking)[2]
    assert reverse.verdict_b == "-"
    assert (reverse.slope_b, reverse.depth_b, reverse.p99_b, reverse.rps_b, reverse.rss_end_b) == (None,) * 5
    assert reverse.depth_a == 0


def test_a_rank_without_samples_has_no_numbers(leaking: Report) -> None:
    nothing = RankReport(rank=1, pp_rank=1, tp_rank=0, verdict_reason="the rank wrote no samples", samples=0)
    silent = replace(leaking, ranks=[leaking.ranks[0], nothing])
    d = diff_ranks(leaking, silent)[1]
    assert (d.verdict_a, d.verdict_b) == ("BOUNDED", "INCONCLUSIVE")
    assert (d.slope_b, d.depth_b, d.p99_b, d.rps_b, d.rss_end_b) == (None,) * 5
    text = render(report_diff(leaking, silent, "a", "b"))
    assert "BOUNDED -> INCONCLUSIVE" in text
    assert "0 -> -" in text
    assert "-> n/a" in text  # RSS end


def test_report_diff_shows_the_verdict_change_and_the_differences(leaking: Report, bounded: Report) -> None:
    text = render(report_diff(leaking, bounded, "reap.json", "drain.json"))
    lines = text.splitlines()
    assert lines[0] == "A: reap.json: reap pp=2 tp=1 60s, completed, LEAK"
    assert lines[1] == "B: drain.json: drain pp=2 tp=1 60s, completed, BOUNDED"
    rank0 = next(line for line in lines if line.split()[:1] == ["0"])
    assert "LEAK -> BOUNDED" in rank0
    assert "60000 -> 0 (-60000)" in rank0  # depth max, with the change
    assert "+180 -> +0 (-180)" in rank0  # RSS slope
    assert "1000 -> 500 (x0.50)" in rank0  # rounds/s, as a ratio
    assert "(x1.00)" in rank0  # p99 unchanged
    rank1 = next(line for line in lines if line.split()[:1] == ["1"])
    assert "BOUNDED -> BOUNDED" in rank1
    assert "0 -> 0 (+0)" in rank1


def test_a_ratio_against_zero_is_not_a_number(make_series: MakeSeries, leaking: Report) -> None:
    stuck = build_report(
        StressConfig(pp=2, duration_s=60.0),
        {0: make_series(0, rounds_per_s=0.0), 1: make_series(1, rounds_per_s=0.0)},
        RunOutcome(),
    )
    assert stuck.ranks[0].rounds_per_s == 0.0
    text = render(report_diff(stuck, leaking, "a", "b"))
    assert "0 -> 1000 (n/a)" in text


# -- the commands --------------------------------------------------------------------


@pytest.fixture
def saved(tmp_path: Path, leaking: Report, bounded: Report) -> tuple[Path, Path]:
    """The two reports in run directories: tmp/reap/report.json and tmp/drain/report.json."""
    paths = []
    for name, report in (("reap", leaking), ("drain", bounded)):
        (tmp_path / name).mkdir()
        paths.append(write_report(report, tmp_path / name))
    return paths[0], paths[1]


def test_report_show(capsys: pytest.CaptureFixture[str], saved: tuple[Path, Path]) -> None:
    assert main(["report", "show", str(saved[0])]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    out = captured.out
    assert "\x1b" not in out
    assert "hicache report (schema 1): reap pp=2 tp=1 60s, completed, LEAK" in out
    assert "slope MB/h [95%]" in out  # the wide table: off a terminal the console is 160 wide
    assert "+180 [+180,+180]" in out
    assert "rank 0: LEAK - work list grows" in out
    assert "rank 1: BOUNDED - RSS" in out


def test_report_show_of_a_run_directory(capsys: pytest.CaptureFixture[str], saved: tuple[Path, Path]) -> None:
    assert main(["report", "show", str(saved[1].parent)]) == 0
    assert "drain pp=2 tp=1 60s, completed, BOUNDED" in capsys.readouterr().out


def test_report_show_of_a_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    assert main(["report", "show", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [f"hicache: error: {missing}: no such report"]


def test_report_diff(capsys: pytest.CaptureFixture[str], saved: tuple[Path, Path]) -> None:
    a, b = saved
    assert main(["report", "diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert f"A: {a}: reap pp=2 tp=1 60s, completed, LEAK" in out
    assert f"B: {b}: drain pp=2 tp=1 60s, completed, BOUNDED" in out
    assert "LEAK -> BOUNDED" in out
    assert "1000 -> 500 (x0.50)" in out


def test_report_diff_with_a_missing_report(
    capsys: pytest.CaptureFixture[str], saved: tuple[Path, Path], tmp_path: Path
) -> None:
    assert main(["report", "diff", str(saved[0]), str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert err.startswith("hicache: error: ")
    assert "nope.json" in err
