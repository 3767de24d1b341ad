"""Memory kinds: anonymous memory and USS read from smaps_rollup at a lower rate, their trend
in the report and `report show`, and the rule that file-backed growth alone is never a leak."""

from __future__ import annotations

import dataclasses
import io
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hicache_cli.analysis import stats
from hicache_cli.analysis.assess import assess_rank
from hicache_cli.analysis.results import Report
from hicache_cli.config import StressConfig
from hicache_cli.outcome import RunOutcome
from hicache_cli.present.report_views import memory_lines, report_summary
from hicache_cli.rank.loop_stats import ROLLUP_BYTES, SMAPS_ROLLUP, MemoryKinds, ProcFile, memory_kinds
from hicache_cli.rank.probe import LoopStats, Probe, RankIdentity, Readings
from hicache_cli.sample import Sample
from tests.conftest import report_json

ROLLUP = """\
55d0c0000000-7ffd00000000 ---p 00000000 00:00 0                          [rollup]
Rss:              222808 kB
Pss:              212053 kB
Shared_Clean:      12840 kB
Shared_Dirty:          0 kB
Private_Clean:     63896 kB
Private_Dirty:    146072 kB
Anonymous:        146072 kB
Swap:                  0 kB
"""
MakeSeries = Callable[..., list[Sample]]


def test_smaps_rollup_is_read_in_bytes(tmp_path: Path) -> None:
    path = tmp_path / "smaps_rollup"
    path.write_text(ROLLUP)
    assert memory_kinds(ProcFile(str(path), ROLLUP_BYTES, keep=False)) == MemoryKinds(
        anon_bytes=146072 * 1024, uss_bytes=(63896 + 146072) * 1024
    )


def test_what_the_kernel_does_not_give_is_none(tmp_path: Path) -> None:
    assert memory_kinds(ProcFile(str(tmp_path / "missing"), ROLLUP_BYTES, keep=False)) == MemoryKinds(None, None)
    path = tmp_path / "partial"
    path.write_text("Rss: 10 kB\nPrivate_Dirty: 5 kB\n")
    assert memory_kinds(ProcFile(str(path), ROLLUP_BYTES, keep=False)) == MemoryKinds(None, None)


def test_this_process_has_both() -> None:
    kinds = memory_kinds(ProcFile(SMAPS_ROLLUP, ROLLUP_BYTES, keep=False))
    assert kinds.anon_bytes is not None and kinds.anon_bytes > 0
    assert kinds.uss_bytes is not None and kinds.uss_bytes > 0


def test_the_probe_reads_them_once_a_second_and_in_the_final_line() -> None:
    now = time.monotonic()
    probe = Probe(
        RankIdentity(rank=0, pp_rank=0, tp_rank=0),
        LoopStats(),
        lambda: Readings(),
        io.StringIO(),
        hz=10.0,
        started=now,
        deadline=now + 60.0,
        stop_grace_s=1.5,
    )
    taken = [probe.sample() for _ in range(21)] + [probe.sample(kind="final")]
    read = [i for i, s in enumerate(taken) if s.anon_bytes is not None]
    assert read == [0, 10, 20, 21]
    assert all((s.uss_bytes is not None) == (s.anon_bytes is not None) for s in taken)


# -- the verdict -------------------------------------------------------------------------


def with_kinds(series: list[Sample], anon_per_s: float, every: int = 10, anon0: float = 80e6) -> list[Sample]:
    """`series` with anonymous memory (growing `anon_per_s`) and USS read every `every`-th sample."""
    return [
        dataclasses.replace(s, anon_bytes=int(anon0 + anon_per_s * s.t), uss_bytes=int(anon0 + anon_per_s * s.t + 5e6))
        if i % every == 0 or s.kind == "final"
        else s
        for i, s in enumerate(series)
    ]


def test_file_backed_growth_alone_is_never_a_leak(make_series: MakeSeries) -> None:
    """RSS grows 180 MB/h (above 100) while anonymous memory stays flat: mapped files."""
    series = with_kinds(make_series(0, rss_per_s=50_000.0, rss_noise=20_000), anon_per_s=0.0)
    verdict = assess_rank(series, None, 100.0).verdict
    assert verdict.verdict == "BOUNDED"
    assert verdict.basis == "anon"
    assert "the growth is file-backed, not a leak" in verdict.reason
    assert verdict.reason.startswith("RSS +180 MB/h") and "anonymous memory +0 MB/h" in verdict.reason


def test_anonymous_growth_with_rss_is_a_leak(make_series: MakeSeries) -> None:
    series = with_kinds(make_series(0, rss_per_s=50_000.0), anon_per_s=50_000.0)
    verdict = assess_rank(series, None, 100.0).verdict
    assert verdict.verdict == "LEAK"
    assert "anonymous memory +180 MB/h" in verdict.reason and "too" in verdict.reason


def test_without_readings_rss_decides_as_before(make_series: MakeSeries) -> None:
    verdict = assess_rank(make_series(0, rss_per_s=50_000.0), None, 100.0).verdict
    assert verdict.verdict == "LEAK" and "anonymous" not in verdict.reason


def test_too_few_readings_leave_rss_to_decide(make_series: MakeSeries) -> None:
    series = with_kinds(make_series(0, n=100, rss_per_s=50_000.0), anon_per_s=0.0, every=20)  # 5 readings
    assessment = assess_rank(series, None, 100.0)
    assert assessment.anon is None and assessment.verdict.verdict == "LEAK"


def test_a_straddling_anonymous_trend_is_inconclusive() -> None:
    rss = stats.Trend(slope=50_000.0, lo=49_000.0, hi=51_000.0, n=600)
    anon = stats.Trend(slope=25_000.0, lo=0.0, hi=60_000.0, n=60)  # 0 .. 216 MB/h around 100
    inputs = stats.VerdictInputs(rss=rss, depth=stats.Trend(0.0, 0.0, 0.0, 600), final_depth=2, span_s=50.0, anon=anon)
    verdict = stats.decide(inputs, 100.0)
    assert (
        verdict.verdict == "INCONCLUSIVE" and "anonymous memory +90 MB/h [95% +0, +216] straddles it" in verdict.reason
    )


def test_a_growing_work_list_is_a_leak_whatever_memory_shows(make_series: MakeSeries) -> None:
    series = with_kinds(make_series(0, rss_per_s=50_000.0, depth_per_s=100.0), anon_per_s=0.0)
    assert assess_rank(series, None, 100.0).verdict.verdict == "LEAK"


# -- the report and report show -------------------------------------------------------------


def test_the_report_says_what_rss_was_made_of(make_series: MakeSeries) -> None:
    config = StressConfig(pp=2, policy="drain", duration_s=60.0)
    run = {
        0: with_kinds(make_series(0, rss_per_s=50_000.0, rss_noise=20_000), anon_per_s=0.0),
        1: make_series(1),  # a rank whose kernel gave none
    }
    report = report_json(config, run, RunOutcome(wall_s=61.0))
    kinds = report["ranks"][0]["memory_kinds"]
    assert kinds["readings"] == 61  # every 10th of 600, and the final line
    assert kinds["anon_start_bytes"] == kinds["anon_end_bytes"] == 80_000_000
    assert kinds["anon_slope_mb_per_h"] == pytest.approx(0.0, abs=1.0)
    assert kinds["uss_end_bytes"] == 85_000_000
    assert kinds["file_backed_end_bytes"] == run[0][-1].rss_bytes - 80_000_000
    assert report["ranks"][1]["memory_kinds"] is None
    typed = Report.from_dict(report).ranks[0].memory_kinds
    assert typed is not None and typed.uss_end_bytes == 85_000_000
    (line,) = memory_lines(Report.from_dict(report))
    assert line.startswith("rank 0 memory: anonymous 76.3 MiB (+0 MB/h [95% ")
    assert "USS 81.1 MiB, file-backed" in line and line.endswith("(61 readings)")
    assert any(str(r).startswith("rank 0 memory: ") for r in report_summary(Report.from_dict(report)).renderables)


def test_report_show_of_an_older_report_has_no_memory_lines(make_series: MakeSeries) -> None:
    report = report_json(StressConfig(pp=2, duration_s=60.0), {0: make_series(0), 1: make_series(1)}, RunOutcome())
    for r in report["ranks"]:
        del r["memory_kinds"]
    assert memory_lines(Report.from_dict(report)) == []
    assert Report.from_dict(report).ranks[0].memory_kinds is None
