"""gate: the CI gate's assertions, judged on reports built from synthetic samples, and its exit code."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.analysis.gate import Assertion, Thresholds, evaluate, exit_code
from hicache_cli.analysis.kinds import CauseKind
from hicache_cli.analysis.report import build_report
from hicache_cli.analysis.results import Report
from hicache_cli.config import StressConfig
from hicache_cli.errors import EXIT_FINDING, EXIT_OK, EXIT_RUN_FAILED
from hicache_cli.execution import rebuild_report
from hicache_cli.outcome import RunOutcome
from hicache_cli.sample import Sample

MakeReport = Callable[..., dict[str, Any]]
MakeSeries = Callable[..., list[Sample]]

LEAK_MB_PER_H = 180.0  # conftest's PP2_LEAK_RSS_PER_S, 50 kB/s


def by_key(results: list[Assertion]) -> dict[tuple[int | None, str], Assertion]:
    keyed = {(a.rank, a.name): a for a in results}
    assert len(keyed) == len(results)  # one assertion of a kind per rank
    return keyed


def test_a_bounded_run_passes_every_assertion(make_pp2_report: MakeReport) -> None:
    report = make_pp2_report(leaking=False)
    results = evaluate(report, Thresholds(max_rss_slope_mb_per_h=200.0, max_depth=2, max_p99_ms=5.0))

    assert sorted(by_key(results)) == sorted(
        (rank, name) for rank in (0, 1) for name in ("bounded", "rss-slope", "max-depth", "max-p99")
    )
    assert all(a.passed is True for a in results)
    assert exit_code(results) == EXIT_OK
    slope = by_key(results)[(0, "rss-slope")]
    assert "is within 200 MB/h" in slope.message
    assert slope.message.startswith("rank 0 ")


def test_a_leaking_run_fails_bounded_and_rss_slope_saying_by_how_much(make_pp2_report: MakeReport) -> None:
    report = make_pp2_report(leaking=True)
    assert report.ranks[0].rss.slope_mb_per_h == pytest.approx(LEAK_MB_PER_H)
    results = by_key(evaluate(report, Thresholds(max_rss_slope_mb_per_h=100.0)))

    bounded, slope = results[(0, "bounded")], results[(0, "rss-slope")]
    assert bounded.passed is False
    assert bounded.message.startswith("rank 0 LEAK: ")
    assert "work list grows" in bounded.message
    assert slope.passed is False
    assert "exceeds 100 MB/h by 80 MB/h" in slope.message
    assert "+180 MB/h" in slope.message
    # The receiving stage stays flat and passes.
    assert results[(1, "bounded")].passed is True
    assert results[(1, "rss-slope")].passed is True
    assert exit_code(list(results.values())) == EXIT_FINDING


def test_a_leak_under_the_rss_limit_still_fails_bounded(make_pp2_report: MakeReport) -> None:
    # 180 MB/h is within a 200 MB/h limit, but the work list grows: the verdict is LEAK.
    results = by_key(evaluate(make_pp2_report(leaking=True), Thresholds(max_rss_slope_mb_per_h=200.0)))
    assert results[(0, "rss-slope")].passed is True
    assert results[(0, "bounded")].passed is False
    assert exit_code(list(results.values())) == EXIT_FINDING


def test_depth_and_p99_are_asserted_only_when_given(make_pp2_report: MakeReport) -> None:
    results = evaluate(make_pp2_report(leaking=True), Thresholds())
    assert {a.name for a in results} == {"bounded", "rss-slope"}
    with_depth = evaluate(make_pp2_report(leaking=True), Thresholds(max_depth=5))
    assert {a.name for a in with_depth} == {"bounded", "rss-slope", "max-depth"}
    with_p99 = evaluate(make_pp2_report(leaking=True), Thresholds(max_p99_ms=5.0))
    assert {a.name for a in with_p99} == {"bounded", "rss-slope", "max-p99"}


def test_max_depth_fails_over_the_limit_saying_by_how_much(make_pp2_report: MakeReport) -> None:
    report = make_pp2_report(leaking=True)
    peak = report.ranks[0].work_list.max
    assert peak > 5
    results = by_key(evaluate(report, Thresholds(max_rss_slope_mb_per_h=1000.0, max_depth=5)))

    depth = results[(0, "max-depth")]
    assert depth.passed is False
    assert depth.message == f"rank 0 work list reached {peak}, {peak - 5} over the limit 5"
    flat = results[(1, "max-depth")]
    assert flat.passed is True
    assert "over the limit" not in flat.message


def test_a_depth_at_the_limit_passes(make_pp2_report: MakeReport) -> None:
    report = make_pp2_report(leaking=False)
    assert report.ranks[0].work_list.max == 0
    results = evaluate(report, Thresholds(max_depth=0))
    assert [a.passed for a in results if a.name == "max-depth"] == [True, True]


def test_max_p99_fails_over_the_limit_saying_by_how_much(make_pp2_report: MakeReport) -> None:
    report = make_pp2_report(leaking=False)
    p99 = report.ranks[0].loop_latency.p99
    assert p99 == pytest.approx(1.0)  # every round took 1 ms
    results = by_key(evaluate(report, Thresholds(max_p99_ms=0.5)))

    latency = results[(0, "max-p99")]
    assert latency.passed is False
    assert latency.message == "rank 0 loop p99 1.00 ms, 0.50 ms over the limit 0.5"
    assert exit_code(list(results.values())) == EXIT_FINDING

    at_limit = evaluate(report, Thresholds(max_p99_ms=p99))
    assert all(a.passed for a in at_limit if a.name == "max-p99")
    assert all("over the limit" not in a.message for a in at_limit)


def test_p99_without_a_round_after_warm_up_is_undecided(make_series: MakeSeries) -> None:
    config = StressConfig(pp=1, duration_s=60.0, warmup_s=30.0)  # 10 s of samples, all in the warm-up
    report = build_report(config, {0: make_series(0, n=100)}, RunOutcome())
    results = by_key(evaluate(report, Thresholds(max_p99_ms=5.0)))
    latency = results[(0, "max-p99")]
    assert latency.passed is None
    assert "no round after warm-up" in latency.message
    assert results[(0, "rss-slope")].passed is None  # no trend either
    assert exit_code(list(results.values())) == EXIT_RUN_FAILED


def test_an_rss_interval_straddling_the_limit_is_undecided(make_series: MakeSeries) -> None:
    config = StressConfig(pp=1, duration_s=60.0, warmup_s=6.0)
    series = make_series(0, rss_per_s=50_000, rss_noise=400_000)
    report = build_report(config, {0: series}, RunOutcome())
    lo, hi = report.ranks[0].rss.slope_ci95_mb_per_h
    limit = (lo + hi) / 2
    assert lo < limit < hi

    slope = by_key(evaluate(report, Thresholds(max_rss_slope_mb_per_h=limit)))[(0, "rss-slope")]
    assert slope.passed is None
    assert f"straddles {limit:g} MB/h" in slope.message
    # Either side of the interval, it decides.
    assert by_key(evaluate(report, Thresholds(max_rss_slope_mb_per_h=lo - 1)))[(0, "rss-slope")].passed is False
    assert by_key(evaluate(report, Thresholds(max_rss_slope_mb_per_h=hi)))[(0, "rss-slope")].passed is True


def test_a_failed_run_is_undecided_naming_the_failure(make_pp2_report: MakeReport) -> None:
    report = make_pp2_report(leaking=False, final=False)  # no rank wrote its final line
    assert report.status == "failed"
    results = evaluate(report, Thresholds())

    run = results[0]
    assert (run.rank, run.name, run.passed) == (None, "run", None)
    assert run.message.startswith("the run failed: ")
    first = report.failures[0]
    assert f"rank {first.rank} {first.kind}: {first.message}" in run.message
    assert all(a.passed for a in results[1:])  # the ranks themselves stayed bounded
    assert exit_code(results) == EXIT_RUN_FAILED


def test_a_failed_run_that_leaked_is_a_finding(make_pp2_report: MakeReport) -> None:
    results = evaluate(make_pp2_report(leaking=True, final=False), Thresholds())
    assert any(a.name == "run" and a.passed is None for a in results)
    assert exit_code(results) == EXIT_FINDING


def test_the_run_assertion_names_at_most_three_failures(make_series: MakeSeries) -> None:
    config = StressConfig(pp=4, duration_s=60.0)
    samples = {rank: make_series(rank, final=False) for rank in range(4)}
    report = build_report(config, samples, RunOutcome())
    assert len(report.failures) == 4
    run = evaluate(report, Thresholds())[0]
    assert run.message.count(" crash: ") == 3


def test_a_rank_without_samples_is_undecided_and_gets_no_other_assertion(make_series: MakeSeries) -> None:
    report = build_report(StressConfig(pp=2, duration_s=60.0), {0: make_series(0)}, RunOutcome())
    results = evaluate(report, Thresholds(max_depth=2, max_p99_ms=5.0))
    silent = [a for a in results if a.rank == 1]
    assert [(a.name, a.passed) for a in silent] == [("bounded", None)]
    assert "wrote no samples" in silent[0].message


def passed(*values: bool | None) -> list[Assertion]:
    return [Assertion(0, f"a{i}", value, "") for i, value in enumerate(values)]


@pytest.mark.parametrize(
    ("results", "code"),
    [
        (passed(), EXIT_OK),
        (passed(True, True), EXIT_OK),
        (passed(True, None), EXIT_RUN_FAILED),
        (passed(None, None), EXIT_RUN_FAILED),
        (passed(True, False), EXIT_FINDING),
        (passed(None, False, True), EXIT_FINDING),  # a failure outranks an undecided
        (passed(False, None), EXIT_FINDING),
    ],
)
def test_exit_code_precedence(results: list[Assertion], code: int) -> None:
    assert exit_code(results) == code


def test_exit_codes_are_the_documented_ones() -> None:
    assert (EXIT_OK, EXIT_FINDING, EXIT_RUN_FAILED) == (0, 1, 3)


# issue 25: a traced program's memory that grows for a reason other than Works


def _traced_report(run: str) -> Report:
    return rebuild_report(Path(__file__).resolve().parents[1] / "data" / "traced" / run)


def test_memory_growth_not_from_works_passes_unless_a_memory_limit_was_asked_for() -> None:
    report = _traced_report("metrics-history")
    assert {r.cause.kind for r in report.ranks if r.cause} == {CauseKind.MEMORY}
    assert all(r.cause is not None for r in report.ranks)
    unasked = evaluate(report, Thresholds(rss_slope_given=False))
    assert exit_code(unasked) == 0
    assert {a.name for a in unasked} == {"bounded"}  # no RSS assertion unless asked
    assert all("no Work leak; --max-rss-slope gates memory" in a.message for a in unasked)
    asked = evaluate(report, Thresholds(max_rss_slope_mb_per_h=500.0, rss_slope_given=True))
    assert exit_code(asked) == 1
    failed = {(a.rank, a.name) for a in asked if a.passed is False}
    assert failed == {(0, "bounded"), (1, "bounded"), (0, "rss-slope"), (1, "rss-slope")}


def test_a_backlog_leak_fails_whatever_the_memory_limit() -> None:
    results = evaluate(_traced_report("outrunning"), Thresholds(rss_slope_given=False))
    assert exit_code(results) == 1
    (failed,) = [a for a in results if a.passed is False]
    assert failed.name == "bounded" and "messages to rank 1 pile up" in failed.message
