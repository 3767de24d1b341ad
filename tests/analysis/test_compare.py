"""compare: one summary row per policy's report, the best of each column, the table, Markdown and bundle."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from rich.console import Console

from hicache_cli.analysis.compare import (
    BUNDLE_SCHEMA_VERSION,
    HEADERS,
    PolicyRow,
    best_of,
    bundle,
    cells,
    not_applicable_row,
    summarize,
)
from hicache_cli.analysis.report import build_report
from hicache_cli.analysis.results import Report
from hicache_cli.config import StressConfig
from hicache_cli.outcome import RunOutcome
from hicache_cli.present.tables import policy_table, to_markdown, to_rich
from hicache_cli.sample import Sample
from hicache_cli.watchdog import Stall
from hicache_model.policies import POLICIES, not_applicable


def compare_table(rows: list[PolicyRow]) -> Any:
    return to_rich(policy_table(rows))


def markdown_table(rows: list[PolicyRow], title: str) -> str:
    return to_markdown(policy_table(rows), title)


MakeSeries = Callable[..., list[Sample]]
MakeRun = Callable[..., dict[int, list[Sample]]]


@pytest.fixture
def policy_report(make_pp2_run: MakeRun) -> Callable[..., Report]:
    """The report of a pp=2 run under `policy`: leaking as `reap` leaks, or bounded as `drain` stays."""

    def build(policy: str, *, leaking: bool, **run_options: Any) -> dict[str, Any]:
        config = StressConfig(pp=2, policy=policy, duration_s=60.0)
        return build_report(config, make_pp2_run(leaking=leaking, **run_options), RunOutcome(wall_s=61.0))

    return build


@pytest.fixture
def two_stage_report(make_series: MakeSeries) -> dict[str, Any]:
    """Two stages that differ in every column, a stall on PP1 and an error on PP0.

    PP0: RSS +180 MB/h, depth 2/s (final 60), 1 ms rounds at 1000/s, 30000 sent.
    PP1: RSS +360 MB/h, depth 0 but 500 once mid-run and 7 at the end, 4 ms rounds at 500/s, 300 sent.
    """
    pp0 = make_series(
        0, n=300, rss_per_s=50_000, depth_per_s=2, sent_per_s=1000, final_state="error", message="RuntimeError: boom"
    )
    pp1 = make_series(1, n=300, rss_per_s=100_000, sent_per_s=10, rounds_per_s=500, latency_s=lambda t: 0.004)
    pp1[150] = dataclasses.replace(pp1[150], depth=500)
    pp1[-1] = dataclasses.replace(pp1[-1], depth=7)
    stall = Stall(rank=1, pid=1001, kind="stall", message="rank 1 round running for 6.0 s", since_t=20.0)
    config = StressConfig(pp=2, policy="adaptive", duration_s=30.0, warmup_s=3.0)
    return build_report(config, {0: pp0, 1: pp1}, RunOutcome(stalls=(stall,)))


def test_summarize_takes_the_steepest_rank_and_pp0s_loop(two_stage_report: Report) -> None:
    report = two_stage_report
    pp0, pp1 = report.ranks
    row = summarize(report)

    assert (row.policy, row.status) == ("adaptive", "failed")
    assert row.verdict == report.verdict
    # RSS: the steepest rank, PP1, with its interval.
    assert pp1.rss.slope_mb_per_h > pp0.rss.slope_mb_per_h
    assert row.slope_mb_per_h == pytest.approx(360.0)
    assert row.slope_ci95 == tuple(pp1.rss.slope_ci95_mb_per_h)
    # Depth: the highest peak and the highest final depth, over ranks (here not the same rank).
    assert row.peak_depth == 500
    assert row.final_depth == 60
    # Latency and rounds/s: PP0's loop only.
    assert (row.p50_ms, row.p99_ms, row.max_ms) == (
        pp0.loop_latency.p50,
        pp0.loop_latency.p99,
        pp0.loop_latency.max,
    )
    assert row.p99_ms == pytest.approx(1.0)
    assert row.rounds_per_s == pytest.approx(1000.0)
    # Messages: every rank's.
    assert row.messages_sent == 30000 + 300
    # Failures: the stall on PP1 and the error on PP0; only the stall is a stall.
    assert sorted(f.kind for f in report.failures) == ["error", "stall"]
    assert (row.stalls, row.failures) == (1, 2)


def test_summarize_counts_hangs_as_stalls(make_series: MakeSeries) -> None:
    hang = Stall(rank=0, pid=1000, kind="hang", message="rank 0 stopped sampling", since_t=5.0)
    config = StressConfig(pp=1, duration_s=60.0)
    report = build_report(config, {0: make_series(0, final=False)}, RunOutcome(stalls=(hang,)))
    assert summarize(report).stalls == 1


def test_summarize_a_run_with_no_samples(make_series: MakeSeries) -> None:
    report = build_report(StressConfig(pp=2, duration_s=60.0), {}, RunOutcome())
    row = summarize(report)
    assert (row.slope_mb_per_h, row.slope_ci95, row.peak_depth, row.final_depth) == (None, None, None, None)
    assert (row.p50_ms, row.p99_ms, row.max_ms, row.rounds_per_s) == (None, None, None, None)
    assert row.messages_sent == 0
    assert row.failures == 2


# best_of


def test_a_leaking_policy_is_never_best_while_a_bounded_one_completed(
    policy_report: Callable[..., Report],
) -> None:
    fast_leak = summarize(policy_report("reap", leaking=True, rounds_per_s=2000.0))
    bounded = summarize(policy_report("drain", leaking=False))
    assert fast_leak.rounds_per_s > bounded.rounds_per_s

    best = best_of([fast_leak, bounded])
    assert best["rps"] == "drain"
    assert set(best.values()) == {"drain"}


def test_without_a_bounded_policy_the_completed_ones_compete(policy_report: Callable[..., Report]) -> None:
    slow = summarize(policy_report("reap", leaking=True))
    fast = summarize(policy_report("batched", leaking=True, rounds_per_s=2000.0))
    assert slow.verdict == fast.verdict == "LEAK"

    best = best_of([slow, fast])
    assert best["rps"] == "batched"
    assert best["slope"] == "reap"  # the same RSS trend: a tie goes to the first
    assert best["sent"] == "reap"  # fewer messages


def test_a_failed_run_is_never_best(policy_report: Callable[..., Report]) -> None:
    crashed = summarize(policy_report("drain", leaking=False, final=False, rounds_per_s=2000.0))
    leaking = summarize(policy_report("reap", leaking=True))
    assert crashed.status == "failed"
    assert crashed.verdict == "BOUNDED"  # bounded until it crashed

    best = best_of([crashed, leaking])
    assert best["rps"] == "reap"
    assert "drain" not in best.values()
    assert best_of([crashed]) == {}


def test_ties_go_to_the_first(policy_report: Callable[..., Report]) -> None:
    a = summarize(policy_report("drain", leaking=False))
    b = summarize(policy_report("batched", leaking=False))
    assert set(best_of([a, b]).values()) == {"drain"}
    assert set(best_of([b, a]).values()) == {"batched"}


def test_columns_without_a_value_have_no_best() -> None:
    row = PolicyRow("drain", "completed", "BOUNDED", None, None, 0, 0, None, None, None, None, 10, 0, 0)
    assert best_of([row]) == {"peak": "drain", "final": "drain", "sent": "drain", "stalls": "drain"}


# the rendered table and the Markdown


@pytest.fixture
def drain_and_reap(policy_report: Callable[..., Report]) -> list[Report]:
    return [policy_report("drain", leaking=False), policy_report("reap", leaking=True, rounds_per_s=2000.0)]


def row_lines(text: str, policies: list[str]) -> dict[str, str]:
    """The one line of `text` that starts with each policy's name."""
    lines = {}
    for policy in policies:
        (line,) = [ln for ln in text.splitlines() if ln.lstrip("| ").startswith(f"{policy} ")]
        lines[policy] = line
    return lines


def test_compare_table_shows_every_policy_and_stars_the_best(drain_and_reap: list[Report]) -> None:
    console = Console(file=io.StringIO(), width=160, force_terminal=True, color_system=None)
    console.print(compare_table([summarize(r) for r in drain_and_reap]))
    text = console.file.getvalue()

    assert "PP0's loop" in text
    for header in HEADERS.values():
        assert header in text
    rows = row_lines(text, ["drain", "reap"])
    assert rows["drain"].count("*") == 9  # the best of every column that has one
    assert "*" not in rows["reap"]
    assert "BOUNDED" in rows["drain"]
    assert "LEAK" in rows["reap"]
    assert "2000" in rows["reap"]  # its rounds/s, shown but not starred


def test_markdown_table(drain_and_reap: list[Report]) -> None:
    rows = [summarize(r) for r in drain_and_reap]
    text = markdown_table(rows, "pp=2, 60s")
    lines = text.splitlines()

    assert lines[0] == "### pp=2, 60s"
    assert lines[2] == "| " + " | ".join(HEADERS.values()) + " |"
    assert lines[3] == "|" + "---|" * len(HEADERS)
    table = [ln for ln in lines if ln.startswith("| ")]
    assert len(table) == 1 + len(rows)  # the header and one row per policy
    assert all(ln.count("|") == len(HEADERS) + 1 for ln in table)
    drain, reap = row_lines(text, ["drain", "reap"]).values()
    assert drain.startswith("| drain | BOUNDED | ")
    assert drain.count("**") == 2 * 9
    assert "| **1000** |" in drain  # rounds/s, the best among the bounded
    assert reap.startswith("| reap | LEAK | ")
    assert "**" not in reap
    assert text.endswith("\n")


def test_a_failed_run_says_so_in_its_verdict_cell(policy_report: Callable[..., Report]) -> None:
    row = summarize(policy_report("drain", leaking=False, final=False))
    (line,) = [ln for ln in markdown_table([row], "t").splitlines() if ln.startswith("| drain")]
    assert line.startswith("| drain | BOUNDED (failed) | ")


# the JSON bundle


def test_bundle(drain_and_reap: list[Report]) -> None:
    common = {"pp": 2, "tp": 1, "duration_s": 60.0}
    data = bundle(drain_and_reap, common)

    assert data["schema_version"] == BUNDLE_SCHEMA_VERSION == 1
    assert data["kind"] == "compare-policies"
    assert data["config"] == common
    assert data["best"] == best_of([summarize(r) for r in drain_and_reap])
    assert [p["policy"] for p in data["policies"]] == ["drain", "reap"]
    for entry, report in zip(data["policies"], drain_and_reap, strict=True):
        assert set(entry) == {"policy", "verdict", "status", "note", "summary", "report"}
        assert entry["note"] is None
        assert (entry["verdict"], entry["status"]) == (report.verdict, report.status)
        assert entry["summary"] == dataclasses.asdict(summarize(report))
        assert entry["report"] == report.to_dict()
    assert data["policies"][1]["verdict"] == "LEAK"

    again = json.loads(json.dumps(data))
    assert again["policies"][0]["report"] == json.loads(json.dumps(drain_and_reap[0].to_dict()))
    assert again["policies"][1]["summary"]["rounds_per_s"] == pytest.approx(2000.0)


# a policy that cannot work on the backend


def test_a_policy_not_applicable_on_the_backend(drain_and_reap: list[Report]) -> None:
    reason = not_applicable("adaptive", "gloo")
    assert reason is not None and "gloo closes the pair" in reason
    assert not_applicable("adaptive", "nccl") is None  # runnable where timed waits are harmless
    assert all(not_applicable(name, "gloo") is None for name in POLICIES if name != "adaptive")
    row = not_applicable_row("adaptive", "gloo", reason)
    assert cells(row) == {
        key: {"policy": "adaptive", "verdict": "not applicable on gloo"}.get(key, "-") for key in HEADERS
    }
    rows = [summarize(drain_and_reap[0]), row, summarize(drain_and_reap[1])]
    data = bundle(drain_and_reap, {}, rows)
    assert [(p["policy"], p["status"]) for p in data["policies"]] == [
        ("drain", "completed"),
        ("adaptive", "not applicable"),
        ("reap", "completed"),
    ]
    assert data["policies"][1]["report"] is None
    assert data["policies"][1]["note"] == f"adaptive: not applicable on gloo: {reason}"
    assert "adaptive" not in data["best"].values()
