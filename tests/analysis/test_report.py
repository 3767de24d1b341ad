"""report: the JSON report built from synthetic per-rank samples with known trends."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from hicache_cli.analysis.report import SCHEMA_VERSION, SERIES_POINTS, build_report, write_report
from hicache_cli.config import StressConfig
from hicache_cli.outcome import RunOutcome
from hicache_cli.protocol import REPORT_FILE
from hicache_cli.sample import Sample
from tests.conftest import report_json

MakeSeries = Callable[..., list[Sample]]

LEAK_RSS_PER_S = 50_000.0  # bytes per second
LEAK_MB_PER_H = LEAK_RSS_PER_S * 3600 / 1e6  # 180 MB/h
CONFIG = StressConfig(pp=2, duration_s=60.0)  # warm-up: auto, where each rank's RSS transient ends
FIXED_WARMUP = StressConfig(pp=2, duration_s=60.0, warmup_s=10.0)


def slow_during_warmup(t: float) -> float:
    return 0.02 if t < 10.0 else 0.001


@pytest.fixture
def leaking_and_bounded(make_series: MakeSeries) -> dict[int, list[Sample]]:
    """PP0 keeps every send (depth and RSS grow); PP1 only receives and stays flat."""
    return {
        0: make_series(
            0,
            rss_per_s=LEAK_RSS_PER_S,
            rss_noise=40_000,
            depth_per_s=1000,
            sent_per_s=1000,
            latency_s=slow_during_warmup,
        ),
        1: make_series(1, rss_noise=20_000, received_per_s=999.8),
    }


def test_report_of_a_leaking_and_a_bounded_rank(leaking_and_bounded: dict[int, list[Sample]]) -> None:
    samples = leaking_and_bounded
    report = report_json(CONFIG, samples, RunOutcome(wall_s=61.234))
    json.dumps(report)  # serialisable as is

    assert report["schema_version"] == SCHEMA_VERSION
    assert report["status"] == "completed"
    assert report["failures"] == []
    assert report["verdict"] == "LEAK"
    assert report["wall_s"] == 61.23
    assert report["config"]["warmup_s"] is None  # as the user gave it: auto
    assert report["config"]["target"]["pp"] == 2
    assert report["environment"]["backend"] == "gloo"
    assert [r["rank"] for r in report["ranks"]] == [0, 1]

    leak, bounded = report["ranks"]
    assert leak["verdict"] == "LEAK"
    assert "work list" in leak["verdict_reason"]
    assert bounded["verdict"] == "BOUNDED"
    assert (leak["pp_rank"], leak["tp_rank"], bounded["pp_rank"], bounded["tp_rank"]) == (0, 0, 1, 0)
    # Neither RSS has a start-up transient (a steady line, a flat one): both warm-ups are the 1 s minimum.
    assert (leak["warmup_s"], bounded["warmup_s"]) == (1.0, 1.0)

    rss = leak["rss"]
    assert rss["slope_mb_per_h"] == pytest.approx(LEAK_MB_PER_H, rel=0.03)
    lo, hi = rss["slope_ci95_mb_per_h"]
    assert lo < hi
    assert lo <= LEAK_MB_PER_H <= hi  # a fixed noise draw; stats tests the interval's calibration
    assert rss["start_bytes"] == samples[0][0].rss_bytes
    assert rss["end_bytes"] == samples[0][-1].rss_bytes
    assert rss["peak_bytes"] == max(s.rss_bytes for s in samples[0] if s.rss_bytes is not None)
    assert rss["trend_p_value"] < 0.01
    assert 0.0 <= rss["autocorrelation"] < 0.5  # independent noise draws
    assert 0.0 < rss["detection_floor_mb_per_h"] < CONFIG.leak_threshold_mb_per_h
    lo, hi = bounded["rss"]["slope_ci95_mb_per_h"]
    assert lo <= 0.0 <= hi
    assert 0.0 < bounded["rss"]["detection_floor_mb_per_h"] < CONFIG.leak_threshold_mb_per_h  # so BOUNDED can hold

    last = samples[0][-1]
    assert leak["work_list"]["max"] == max(s.depth for s in samples[0])
    assert leak["work_list"]["final"] == last.depth
    assert leak["work_list"]["growth_per_s"] == pytest.approx(1000.0, rel=1e-3)
    assert leak["work_list"]["held_bytes_final"] == last.held_bytes
    assert leak["work_list"]["bytes_per_work"] == pytest.approx(LEAK_RSS_PER_S / 1000, rel=0.03)
    assert bounded["work_list"] == {
        "max": 0,
        "final": 0,
        "growth_per_s": 0.0,
        "held_bytes_final": 0,
        "bytes_per_work": None,
    }

    assert leak["rounds"] == last.rounds
    assert leak["rounds_per_s"] == pytest.approx(last.rounds / last.t, abs=0.1)
    assert (leak["messages"]["sent"], leak["messages"]["received"]) == (last.sent, 0)
    assert leak["backlog_at_stop"] == {"outstanding_sends": last.depth, "unreceived_messages": 0}
    unreceived = samples[0][-1].sent - samples[1][-1].received
    assert unreceived > 0
    # the PP-sync messages per peer: what rank 0 sent to rank 1, and what rank 1 had not received
    (to_1,) = leak["messages"]["by_peer"]
    assert (to_1["peer"], to_1["group"], to_1["sent"], to_1["backlog"]) == (1, "pp", last.sent, unreceived)
    (from_0,) = bounded["messages"]["by_peer"]
    assert (from_0["peer"], from_0["received"], from_0["backlog"]) == (0, samples[1][-1].received, None)
    assert leak["cause"] is None  # hicache's own ranks: no cause beyond the verdict's reason
    assert bounded["backlog_at_stop"] == {"outstanding_sends": 0, "unreceived_messages": unreceived}

    assert leak["stop"] == "reached the deadline"
    assert leak["pid"] == last.pid
    assert leak["samples"] == len(samples[0])


def test_rss_slope_is_reported_in_mb_per_hour(make_series: MakeSeries) -> None:
    config = StressConfig(pp=1, duration_s=60.0)
    rss = report_json(config, {0: make_series(0, rss_per_s=LEAK_RSS_PER_S)}, RunOutcome())["ranks"][0]["rss"]
    assert rss["slope_mb_per_h"] == pytest.approx(LEAK_MB_PER_H, abs=0.05)
    assert rss["slope_ci95_mb_per_h"] == pytest.approx([LEAK_MB_PER_H, LEAK_MB_PER_H], abs=0.05)


def test_loop_latency_leaves_out_the_warm_up(leaking_and_bounded: dict[int, list[Sample]]) -> None:
    series = leaking_and_bounded[0]
    latency = report_json(FIXED_WARMUP, leaking_and_bounded, RunOutcome())["ranks"][0]["loop_latency_ms"]
    # Every round after the 10 s warm-up took 1 ms; the 20 ms rounds before it do not count.
    assert 1.0 <= latency["p50"] <= 1.13
    assert 1.0 <= latency["p99"] <= 1.13
    assert latency["max"] == pytest.approx(1.0)
    cut = next(i for i, s in enumerate(series) if s.t >= 10.0)
    assert latency["rounds_measured"] == series[-1].rounds - series[cut - 1].rounds

    # Auto warm-up follows RSS, which has no transient here: the window starts at the rank's own warm-up.
    rank = report_json(CONFIG, leaking_and_bounded, RunOutcome())["ranks"][0]
    cut = next(i for i, s in enumerate(series) if s.t >= rank["warmup_s"])
    assert rank["loop_latency_ms"]["rounds_measured"] == series[-1].rounds - series[cut - 1].rounds
    assert rank["loop_latency_ms"]["max"] == pytest.approx(20.0)  # slow rounds from before 10 s now count


def test_series_is_downsampled_keeping_both_ends(leaking_and_bounded: dict[int, list[Sample]]) -> None:
    samples = leaking_and_bounded[0]
    series = report_json(CONFIG, leaking_and_bounded, RunOutcome())["ranks"][0]["series"]
    assert set(series) == {"t", "rss_bytes", "anon_bytes", "depth", "rounds", "lat_p99_ms", "round_age_s"}
    assert len({len(v) for v in series.values()}) == 1  # parallel lists
    assert series["t"][0] == samples[0].t
    assert series["t"][-1] == samples[-1].t
    assert series["depth"][-1] == samples[-1].depth
    assert series["t"] == sorted(series["t"])


def test_series_carry_the_last_anonymous_reading(make_series: MakeSeries) -> None:
    """Anonymous memory is read about once a second: a point between readings shows the last."""
    samples = make_series(0, n=50)
    read = {i: 50_000_000 + i * 1000 for i in range(5, 50, 10)}  # samples 5, 15, 25, ...
    samples = [replace(s, anon_bytes=read.get(i)) for i, s in enumerate(samples)]
    series = report_json(StressConfig(pp=1, duration_s=5.0), {0: samples}, RunOutcome())["ranks"][0]["series"]
    assert series["anon_bytes"][:5] == [None] * 5
    assert series["anon_bytes"][5:15] == [read[5]] * 10
    assert series["anon_bytes"][-1] == read[45]


def test_series_of_a_downstream_rank_carry_its_backlog(make_series: MakeSeries) -> None:
    """Rank 1's `unreceived` at each point: what rank 0 had sent by then, less what rank 1 had received."""
    samples = {0: make_series(0, sent_per_s=1000), 1: make_series(1, received_per_s=900)}
    report = report_json(CONFIG, samples, RunOutcome())
    first, second = (r["series"] for r in report["ranks"])
    assert "unreceived" not in first  # rank 0 has no upstream
    assert second["unreceived"][0] == 100 - 90  # at 0.1 s: 100 sent, 90 received
    assert second["unreceived"][-1] == report["ranks"][1]["backlog_at_stop"]["unreceived_messages"] == 6000


@pytest.mark.parametrize(
    "n",
    [
        1,
        50,
        200,
        201,
        399,
        pytest.param(
            400,
        ),
        pytest.param(
            600,
        ),
        pytest.param(
            1000,
        ),
    ],
)
def test_series_is_at_most_200_points(make_series: MakeSeries, n: int) -> None:
    config = StressConfig(pp=1, duration_s=n / 10)
    report = report_json(config, {0: make_series(0, n=n)}, RunOutcome())
    series = report["ranks"][0]["series"]
    assert len(series["t"]) <= SERIES_POINTS
    if n <= SERIES_POINTS:
        assert len(series["t"]) == n
    assert series["t"][-1] == pytest.approx(n / 10)


def test_a_rank_without_its_final_line_crashed(make_series: MakeSeries) -> None:
    samples = {0: make_series(0, sent_per_s=1000), 1: make_series(1, final=False)}
    report = report_json(CONFIG, samples, RunOutcome())
    assert report["status"] == "failed"
    assert [(f["rank"], f["kind"]) for f in report["failures"]] == [(1, "crash")]
    assert "final line" in report["failures"][0]["message"]
    assert "no final line" in report["ranks"][1]["stop"]
    assert report["ranks"][1]["state"] == "running"


def test_a_rank_that_wrote_nothing_is_inconclusive_and_crashed(make_series: MakeSeries) -> None:
    samples = {0: make_series(0)}
    report = report_json(CONFIG, samples, RunOutcome())
    missing = report["ranks"][1]
    assert missing["verdict"] == "INCONCLUSIVE"
    assert missing["samples"] == 0
    assert (missing["pp_rank"], missing["tp_rank"]) == (1, 0)
    assert report["verdict"] == "INCONCLUSIVE"  # one rank BOUNDED, the other unknown
    assert report["status"] == "failed"
    assert [(f["rank"], f["kind"]) for f in report["failures"]] == [(1, "crash")]
    assert "never started" in report["failures"][0]["message"]


def test_an_empty_file_counts_as_no_samples(make_series: MakeSeries) -> None:
    report = report_json(CONFIG, {0: make_series(0), 1: []}, RunOutcome())
    assert report["ranks"][1]["verdict"] == "INCONCLUSIVE"
    assert report["ranks"][1]["samples"] == 0


def test_an_interrupted_run_is_interrupted_not_failed(make_series: MakeSeries) -> None:
    samples = {0: make_series(0, final=False), 1: make_series(1, final=False)}
    report = report_json(CONFIG, samples, RunOutcome(interrupted=True))
    assert report["status"] == "interrupted"
    assert report["failures"] == []


def test_ranks_the_launcher_stopped_timed_out(make_series: MakeSeries) -> None:
    samples = {0: make_series(0), 1: make_series(1, final=False)}
    report = report_json(CONFIG, samples, RunOutcome(stopped="ranks still running 30 s after the deadline"))
    assert report["status"] == "failed"
    assert [(f["rank"], f["kind"]) for f in report["failures"]] == [(1, "timeout")]
    assert "ranks still running 30 s after the deadline" in report["failures"][0]["message"]


def test_a_rank_that_stopped_on_an_error_failed(make_series: MakeSeries) -> None:
    samples = {0: make_series(0), 1: make_series(1, final_state="error", message="RuntimeError: peer went away")}
    report = report_json(CONFIG, samples, RunOutcome())
    assert report["status"] == "failed"
    failure = report["failures"][0]
    assert (failure["rank"], failure["kind"], failure["message"]) == (1, "error", "RuntimeError: peer went away")
    assert set(failure) == {"rank", "kind", "exit_code", "signal", "message", "stack_file", "at_s"}


def test_a_short_run_is_inconclusive(make_series: MakeSeries) -> None:
    config = StressConfig(pp=1, duration_s=2.0)  # 1 s warm-up leaves 1 s of data
    samples = {0: make_series(0, n=20, rss_per_s=LEAK_RSS_PER_S)}
    rank = report_json(config, samples, RunOutcome())["ranks"][0]
    assert rank["verdict"] == "INCONCLUSIVE"
    assert "too little data" in rank["verdict_reason"]


def test_a_run_inside_its_warm_up_has_no_latency_window(make_series: MakeSeries) -> None:
    config = StressConfig(pp=1, duration_s=60.0, warmup_s=30.0)
    rank = report_json(config, {0: make_series(0, n=100)}, RunOutcome())["ranks"][0]
    assert rank["verdict"] == "INCONCLUSIVE"
    assert rank["loop_latency_ms"] == {"p50": None, "p99": None, "max": None, "rounds_measured": 0}


def test_missing_rss_readings_give_no_rss_trend(make_series: MakeSeries) -> None:
    series = [Sample.from_dict({**json.loads(s.to_json()), "rss_bytes": None}) for s in make_series(0, depth_per_s=0)]
    rank = report_json(StressConfig(pp=1, duration_s=60.0), {0: series}, RunOutcome())["ranks"][0]
    assert rank["rss"] == {
        "start_bytes": None,
        "end_bytes": None,
        "peak_bytes": None,
        "slope_mb_per_h": None,
        "slope_ci95_mb_per_h": None,
        "detection_floor_mb_per_h": None,
        "trend_p_value": None,
        "autocorrelation": None,
    }
    assert rank["warmup_s"] == 1.0  # no RSS to find a transient in: the minimum
    assert rank["verdict"] == "INCONCLUSIVE"


def test_upstream_is_the_same_tp_rank_one_stage_earlier(make_series: MakeSeries) -> None:
    config = StressConfig(pp=2, tp=2, duration_s=60.0)
    samples = {
        0: make_series(0, tp=2, sent_per_s=1000, depth_per_s=1000),
        1: make_series(1, tp=2, sent_per_s=500, depth_per_s=500),
        2: make_series(2, tp=2, received_per_s=990),
        3: make_series(3, tp=2, received_per_s=490),
    }
    ranks = report_json(config, samples, RunOutcome())["ranks"]
    assert [(r["pp_rank"], r["tp_rank"]) for r in ranks] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert ranks[2]["backlog_at_stop"]["unreceived_messages"] == samples[0][-1].sent - samples[2][-1].received
    assert ranks[3]["backlog_at_stop"]["unreceived_messages"] == samples[1][-1].sent - samples[3][-1].received
    assert ranks[0]["backlog_at_stop"]["unreceived_messages"] == 0


def test_write_report_is_atomic_and_writes_the_copy(
    tmp_path: Path, leaking_and_bounded: dict[int, list[Sample]]
) -> None:
    report = build_report(CONFIG, leaking_and_bounded, RunOutcome())
    run_dir, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run_dir.mkdir()
    elsewhere.mkdir()
    (run_dir / REPORT_FILE).write_text("old, half-written junk")

    path = write_report(report, run_dir, elsewhere / "copy.json")

    assert path == run_dir / REPORT_FILE
    assert json.loads(path.read_text()) == report.to_dict()
    assert json.loads((elsewhere / "copy.json").read_text()) == report.to_dict()
    assert path.read_text().endswith("\n")
    assert sorted(p.name for p in run_dir.iterdir()) == [REPORT_FILE]  # no temporary files left
    assert sorted(p.name for p in elsewhere.iterdir()) == ["copy.json"]


def test_write_report_without_a_copy(tmp_path: Path, make_series: MakeSeries) -> None:
    report = build_report(StressConfig(pp=1), {0: make_series(0, n=30)}, RunOutcome())
    path = write_report(report, tmp_path)
    assert json.loads(path.read_text()) == report.to_dict()
    assert [p.name for p in tmp_path.iterdir()] == [REPORT_FILE]
