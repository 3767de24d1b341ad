"""dashboard: sparklines, rank states, the model built from synthetic samples, its rendering, the live view."""

from __future__ import annotations

import dataclasses
import io
import re
from collections.abc import Callable

import pytest
from rich.console import Console

from hicache_cli.config import RunConfig, StressConfig
from hicache_cli.present.dashboard import (
    SPARK,
    SPARK_POINTS,
    STALL_AGE_S,
    Dashboard,
    DashboardModel,
    rank_state,
    render,
    sparkline,
)
from hicache_cli.present.progress import LiveView
from hicache_cli.sample import Sample

MakeSample = Callable[..., Sample]
MakeSeries = Callable[..., list[Sample]]
Run = dict[int, list[Sample]]
MakePP2Run = Callable[..., Run]

CONFIG = StressConfig(pp=2, duration_s=60.0)  # warm-up: auto, per rank
FIXED_WARMUP = StressConfig(pp=2, duration_s=60.0, warmup_s=10.0)
LEAK_MB_PER_H = 180.0  # conftest's PP2_LEAK_RSS_PER_S


def render_text(model: DashboardModel, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    console.print(render(model, width))
    return console.file.getvalue()


def rank_line(text: str, rank: int, pp_tp: str) -> str:
    """The dashboard line of `rank`: its number, then pp/tp."""
    lines = [line for line in text.splitlines() if re.match(rf"^\s*{rank}\s+{pp_tp}\s", line)]
    assert len(lines) == 1, text
    return lines[0]


def upto(run: Run, t: float) -> Run:
    """The samples of every rank taken by run time `t`, as a dashboard would have seen them then."""
    return {rank: [s for s in series if s.t <= t] for rank, series in run.items()}


# -- sparkline -----------------------------------------------------------------------


def test_sparkline_of_nothing_is_empty() -> None:
    assert sparkline([], 12) == ""


def test_a_flat_sparkline_is_the_lowest_block() -> None:
    assert sparkline([5.0] * 10, 12) == SPARK[0] * 10


def test_a_rising_sparkline_spans_the_blocks() -> None:
    assert sparkline([float(v) for v in range(len(SPARK))], len(SPARK)) == SPARK
    assert sparkline([float(v) for v in reversed(range(len(SPARK)))], len(SPARK)) == SPARK[::-1]


def test_a_short_series_is_not_padded_to_the_width() -> None:
    assert sparkline([1.0, 2.0, 3.0], 12) == SPARK[0] + SPARK[4] + SPARK[-1]


def test_a_long_series_is_thinned_to_the_width_keeping_both_ends() -> None:
    line = sparkline([float(v) for v in range(100)], 10)
    assert len(line) == 10
    assert line[0] == SPARK[0]
    assert line[-1] == SPARK[-1]
    levels = [SPARK.index(c) for c in line]
    assert levels == sorted(levels)


def test_a_one_column_sparkline() -> None:
    assert len(sparkline([1.0, 2.0, 3.0], 1)) == 1


# -- rank state ----------------------------------------------------------------------


def test_a_rank_without_samples_is_starting() -> None:
    assert rank_state(None) == "starting"


@pytest.mark.parametrize(
    ("fields", "state"),
    [
        ({"state": "running", "round_age_s": 0.01}, "running"),
        ({"state": "stopping", "round_age_s": 0.01}, "stopping"),
        ({"state": "running", "round_age_s": STALL_AGE_S - 0.01}, "running"),
        ({"state": "running", "round_age_s": STALL_AGE_S}, "stalled"),
        ({"state": "running", "round_age_s": 30.0}, "stalled"),
        ({"state": "done", "kind": "final"}, "done"),
        ({"state": "error", "kind": "final"}, "crashed"),
        ({"state": "interrupted", "kind": "final"}, "interrupted"),
        ({"state": "done", "kind": "final", "round_age_s": 30.0}, "done"),  # a finished rank never stalls
        ({"state": "error", "kind": "final", "round_age_s": 30.0}, "crashed"),
    ],
)
def test_rank_state(make_sample: MakeSample, fields: dict[str, object], state: str) -> None:
    assert rank_state(make_sample(**fields)) == state


# -- the model -----------------------------------------------------------------------


def test_model_of_a_leaking_and_a_bounded_rank(make_pp2_run: MakePP2Run) -> None:
    run = make_pp2_run(final=False)
    model = Dashboard(CONFIG, "runs/x").model(run, launch_elapsed=63.0)

    assert model.run_t == pytest.approx(60.0)
    assert model.launch_elapsed == 63.0
    assert model.run_dir == "runs/x"
    assert model.verdict == "LEAK"
    assert model.started
    assert not model.finished

    leak, bounded = model.rows
    assert [(r.rank, r.pp_rank, r.tp_rank, r.state) for r in model.rows] == [(0, 0, 0, "running"), (1, 1, 0, "running")]
    assert (leak.verdict, bounded.verdict) == ("LEAK", "BOUNDED")

    last = run[0][-1]
    # Auto warm-up: a steady leak has no start-up transient, so its warm-up is the 1 s minimum.
    base = next(s for s in run[0] if s.t >= 1.0)  # the first sample after the warm-up
    assert leak.depth == last.depth == 60_000
    assert leak.rss_bytes == last.rss_bytes
    assert leak.rss_change_bytes == last.rss_bytes - base.rss_bytes
    assert leak.trend_mb_per_h == pytest.approx(LEAK_MB_PER_H, rel=1e-3)
    assert leak.rounds_per_s == pytest.approx(1000.0)
    assert leak.p99_ms == pytest.approx(1.0)
    assert bounded.depth == 0
    assert bounded.rss_change_bytes == 0
    assert bounded.trend_mb_per_h == pytest.approx(0.0, abs=1e-6)

    for row in model.rows:
        assert 2 <= len(row.depth_spark) <= SPARK_POINTS
        assert 2 <= len(row.rss_spark) <= SPARK_POINTS
    assert leak.depth_spark == sorted(leak.depth_spark)
    assert leak.depth_spark[-1] == last.depth
    assert leak.rss_spark[-1] == last.rss_bytes
    assert set(bounded.depth_spark) == {0.0}

    # A warm-up the user gave is the same for every rank: the change counts from 10 s.
    fixed = Dashboard(FIXED_WARMUP, "runs/x").model(run, launch_elapsed=63.0).rows[0]
    base = next(s for s in run[0] if s.t >= 10.0)
    assert fixed.rss_change_bytes == last.rss_bytes - base.rss_bytes
    assert fixed.trend_mb_per_h == pytest.approx(LEAK_MB_PER_H, rel=1e-3)


def test_the_verdict_is_inconclusive_until_there_is_data_after_the_warm_up(make_pp2_run: MakePP2Run) -> None:
    run = make_pp2_run(final=False)
    dashboard = Dashboard(FIXED_WARMUP, "runs/x")  # the 10 s the user gave, for every rank

    inside_warmup = dashboard.model(upto(run, 5.0), 6.0)
    assert inside_warmup.verdict == "INCONCLUSIVE"
    assert [r.verdict for r in inside_warmup.rows] == [None, None]
    assert [r.trend_mb_per_h for r in inside_warmup.rows] == [None, None]
    assert [r.rss_change_bytes for r in inside_warmup.rows] == [None, None]

    just_after = dashboard.model(upto(run, 11.0), 12.0)  # 1 s of data after the warm-up
    assert just_after.verdict == "INCONCLUSIVE"
    assert [r.verdict for r in just_after.rows] == ["INCONCLUSIVE", "INCONCLUSIVE"]

    later = dashboard.model(upto(run, 30.0), 31.0)  # the same dashboard: trends are recomputed
    assert later.verdict == "LEAK"
    assert [r.verdict for r in later.rows] == ["LEAK", "BOUNDED"]


def test_a_rank_without_samples_shows_starting(make_pp2_run: MakePP2Run) -> None:
    run = make_pp2_run(final=False)
    for samples in ({0: run[0]}, {0: run[0], 1: []}):
        model = Dashboard(CONFIG, "runs/x").model(samples, 61.0)
        waiting = model.rows[1]
        assert (waiting.rank, waiting.state) == (1, "starting")
        assert waiting.rss_bytes is None
        assert waiting.verdict is None
        assert model.rows[0].state == "running"
        assert model.started
        assert model.verdict == "LEAK"  # one leaking rank is a leak, as in the report


def test_before_any_sample_nothing_has_started() -> None:
    model = Dashboard(CONFIG, "runs/x").model({}, 2.5)
    assert [r.state for r in model.rows] == ["starting", "starting"]
    assert not model.started
    assert not model.finished
    assert model.run_t == 0.0
    assert model.verdict == "INCONCLUSIVE"


def test_finished_only_when_every_rank_has_its_final_line(make_pp2_run: MakePP2Run, make_series: MakeSeries) -> None:
    running, stopped = make_pp2_run(final=False), make_pp2_run(final=True)

    def finished(samples: Run) -> bool:
        return Dashboard(CONFIG, "runs/x").model(samples, 61.0).finished

    assert not finished({0: stopped[0], 1: running[1]})
    assert not finished({0: stopped[0]})
    assert finished(stopped)
    crashed = make_series(1, final_state="error", message="RuntimeError: peer went away")
    interrupted = make_series(1, final_state="interrupted", message="interrupted")
    assert finished({0: stopped[0], 1: crashed})
    assert finished({0: stopped[0], 1: interrupted})
    model = Dashboard(CONFIG, "runs/x").model({0: stopped[0], 1: crashed}, 61.0)
    assert [r.state for r in model.rows] == ["done", "crashed"]


def test_a_stalled_rank_is_not_finished(make_pp2_run: MakePP2Run, make_sample: MakeSample) -> None:
    run = make_pp2_run(final=True)
    run[1] = [*run[1][:-1], make_sample(rank=1, t=60.0, round_age_s=STALL_AGE_S + 1, blocked_on="recv")]
    model = Dashboard(CONFIG, "runs/x").model(run, 61.0)
    assert [r.state for r in model.rows] == ["done", "stalled"]
    assert model.rows[1].blocked_on == "recv"
    assert not model.finished


def test_ranks_follow_pp_and_tp(make_series: MakeSeries) -> None:
    config = StressConfig(pp=2, tp=2, duration_s=60.0)
    samples = {rank: make_series(rank, tp=2, n=50, final=False) for rank in range(4)}
    model = Dashboard(config, "runs/x").model(samples, 6.0)
    assert [(r.rank, r.pp_rank, r.tp_rank) for r in model.rows] == [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]


# -- rendering -----------------------------------------------------------------------


@pytest.mark.parametrize("width", [120, 80, 60])
def test_render_fits_the_width_and_shows_every_rank(make_pp2_run: MakePP2Run, width: int) -> None:
    model = Dashboard(CONFIG, "runs/x").model(make_pp2_run(final=False), 61.0)
    text = render_text(model, width)

    assert max(len(line) for line in text.splitlines()) <= width
    assert "60000" in rank_line(text, 0, "0/0")
    assert "running" in rank_line(text, 0, "0/0")
    assert "running" in rank_line(text, 1, "1/0")
    assert "+180" in rank_line(text, 0, "0/0")
    header = text.splitlines()[0]
    assert "reap" in header
    assert ("pp=2 x tp=1" if width >= 70 else "pp2xtp1") in header
    assert "LEAK" in header
    assert "run dir: runs/x" in text
    assert "60.0s/60.0s" in text


def test_render_at_120_columns_has_every_column(make_pp2_run: MakePP2Run) -> None:
    text = render_text(Dashboard(CONFIG, "runs/x").model(make_pp2_run(final=False), 61.0), 120)
    for name in ("rank", "pp/tp", "state", "RSS", "Δwarm", "MB/h", "depth", "p50/p99/max ms", "rnd/s", "age"):
        assert name in text
    assert "verdict so far: LEAK" in text
    assert "…" not in text
    assert set(rank_line(text, 0, "0/0")) & set(SPARK)


def test_render_at_80_columns_has_short_sparklines(make_pp2_run: MakePP2Run) -> None:
    text = render_text(Dashboard(CONFIG, "runs/x").model(make_pp2_run(final=False), 61.0), 80)
    leak = rank_line(text, 0, "0/0")
    assert set(leak) & set(SPARK)
    assert SPARK[0] in leak and SPARK[-1] in leak  # the rising depth and RSS
    assert SPARK[0] * 6 in rank_line(text, 1, "1/0")  # the flat ones
    assert "Δwarm" not in text
    assert "age" in text
    assert "…" not in text


def test_render_at_60_columns_has_no_sparklines(make_pp2_run: MakePP2Run) -> None:
    text = render_text(Dashboard(CONFIG, "runs/x").model(make_pp2_run(final=False), 61.0), 60)
    assert not set(text) & set(SPARK)
    assert "age" not in text
    assert "…" not in text


@pytest.mark.parametrize("width", [110, 117])
def test_the_wide_layout_fits_from_110_columns(make_pp2_run: MakePP2Run, width: int) -> None:
    text = render_text(Dashboard(CONFIG, "runs/x").model(make_pp2_run(final=False), 61.0), width)
    assert "…" not in text
    assert rank_line(text, 0, "0/0").rstrip().endswith("0.0s")


@pytest.mark.parametrize("width", [120, 80, 60])
def test_render_before_any_sample_says_starting(width: int) -> None:
    text = render_text(Dashboard(CONFIG, "runs/x").model({}, 3.0), width)
    assert "starting (3.0s)" in text
    assert "remaining" not in text
    assert "INCONCLUSIVE" in text.splitlines()[0]
    assert "starting" in rank_line(text, 0, "0/0")
    assert "starting" in rank_line(text, 1, "1/0")
    assert max(len(line) for line in text.splitlines()) <= width


@pytest.mark.parametrize("width", [120, 80, 60])
def test_render_shows_crashed_and_stalled_ranks(make_pp2_run: MakePP2Run, make_sample: MakeSample, width: int) -> None:
    run = make_pp2_run(final=False)
    run[0] = [*run[0], make_sample(rank=0, t=60.1, state="error", kind="final", message="RuntimeError: x")]
    run[1] = [*run[1], make_sample(rank=1, t=60.1, round_age_s=5.0)]
    text = render_text(Dashboard(CONFIG, "runs/x").model(run, 61.0), width)
    assert "crashed" in rank_line(text, 0, "0/0")
    assert "stalled" in rank_line(text, 1, "1/0")


@pytest.mark.parametrize("width", [80, 60])
def test_an_interrupted_rank_shows_its_whole_state(
    make_pp2_run: MakePP2Run, make_series: MakeSeries, width: int
) -> None:
    run = {0: make_pp2_run()[0], 1: make_series(1, final_state="interrupted", message="interrupted")}
    text = render_text(Dashboard(CONFIG, "runs/x").model(run, 61.0), width)
    assert "interrupted" in rank_line(text, 1, "1/0")


# -- the live view -------------------------------------------------------------------


def test_live_view_leaves_its_last_frame(make_pp2_run: MakePP2Run) -> None:
    run = make_pp2_run(final=True)
    console = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None)
    with LiveView(Dashboard(FIXED_WARMUP, "runs/x"), console) as view:
        view(upto(run, 5.0), 6.0)  # inside the 10 s warm-up: no verdict yet
        view(run, 61.0)
    out = console.file.getvalue()

    assert "verdict so far: INCONCLUSIVE" in out  # the first frame was drawn
    last_frame = out.rsplit("\x1b[2K", 1)[1]  # after the last line the Live view erased
    assert "verdict so far: LEAK" in last_frame
    assert "INCONCLUSIVE" not in last_frame
    assert "60000" in rank_line(last_frame, 0, "0/0")
    assert "done" in rank_line(last_frame, 0, "0/0")
    assert "done" in rank_line(last_frame, 1, "1/0")


# -- across nodes -----------------------------------------------------------------------


def _on(series: list[Sample], node: int, host: str) -> list[Sample]:
    return [dataclasses.replace(s, node=node, host=host) for s in series]


def test_across_nodes_the_header_says_which_ranks_each_node_runs(make_series: MakeSeries) -> None:
    config = StressConfig(pp=4, duration_s=60.0)
    samples = {
        0: _on(make_series(0, n=30), 1, "gpu-b"),  # torchrun's c10d picks which ranks go where
        1: _on(make_series(1, n=30), 1, "gpu-b"),
        2: _on(make_series(2, n=30), 0, "gpu-a"),
        3: _on(make_series(3, n=30), 0, "gpu-a"),
    }
    model = Dashboard(config, "run").model(samples, 5.0)
    assert model.nodes == {0: ("gpu-a", [2, 3]), 1: ("gpu-b", [0, 1])}
    text = render_text(model, 118)
    assert "node 0 (gpu-a): ranks 2,3  node 1 (gpu-b): ranks 0,1" in text


def test_on_one_machine_the_header_has_no_node_line(make_pp2_run: MakePP2Run) -> None:
    model = Dashboard(CONFIG, "run").model(make_pp2_run(n=30), 5.0)
    assert list(model.nodes) == [0]
    assert "node 0" not in render_text(model, 118)


# -- header ------------------------------------------------------------------------


def test_the_header_says_what_the_ranks_run_on(make_pp2_run: MakePP2Run, make_series: MakeSeries) -> None:
    """`auto` until the ranks say (docs/dashboard.md's `cpu/gloo`), then their device; the
    backend is the PP-sync groups'."""
    dashboard = Dashboard(CONFIG, "runs/x")
    assert "reap  pp=2 x tp=1  auto/gloo  verdict so far" in render_text(dashboard.model({}, 2.0), 100)
    run = {r: [dataclasses.replace(s, device_name="cpu") for s in series] for r, series in make_pp2_run().items()}
    assert "reap  pp=2 x tp=1  cpu/gloo  verdict so far" in render_text(dashboard.model(run, 61.0), 100)
    gpu = {r: [dataclasses.replace(s, device_name="NVIDIA H200") for s in series] for r, series in run.items()}
    nccl = Dashboard(
        dataclasses.replace(CONFIG, target=dataclasses.replace(CONFIG.target, pp_backend="nccl")), "runs/x"
    )
    assert "cuda/nccl" in render_text(nccl.model(gpu, 61.0), 100)


def test_the_backlog_column_shows_what_a_rank_sent_and_its_receiver_has_not_asked_for() -> None:
    """A recorded trace (tests/data/traced): rank 0 outran rank 1; the column is red there."""
    from pathlib import Path

    from hicache_cli.series import read_run

    run = Path(__file__).resolve().parents[1] / "data" / "traced" / "outrunning"
    model = Dashboard(RunConfig.load(run), str(run)).model(read_run(run), 40.0)
    sender, receiver = model.rows
    assert (sender.backlog, sender.backlog_grows) == (236136, True)
    assert (receiver.backlog, receiver.backlog_grows) == (None, False)
    text = render_text(model, 120)
    assert any(line.startswith("rank") and "backlog" in line for line in text.splitlines())
    assert " 236136 " in text and "…" not in text
