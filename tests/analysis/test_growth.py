"""growth: a depth that only rises, in stairs, is a leak; on synthetic stairs and on reap
runs recorded beside two CPU hogs (tests/data/under_load, README there)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from hicache_cli.analysis import growth, stats
from hicache_cli.analysis.assess import assess_rank
from hicache_cli.series import read_run

RECORDED = Path(__file__).resolve().parents[1] / "data" / "under_load"
MB_H = stats.MB / 3600.0


def stairs(rate: float, seconds: float = 8.0, stall_s: float = 1.0, every_s: float = 2.0, dt: float = 0.1):
    """A list gaining `rate` Works/s, whose rank is descheduled for `stall_s` every `every_s`
    seconds and then catches up: flat stretches, then a jump."""
    points, value, behind = [], 0.0, 0.0
    for i in range(int(seconds / dt)):
        t = i * dt
        behind += rate * dt
        if t % every_s >= stall_s:  # running: it catches up on everything it owed
            value, behind = value + behind, 0.0
        points.append((t, value))
    return points


def uneven_stairs(seconds: float = 8.0, dt: float = 0.1, seed: int = 3):  # seed 3: lo is 0, as recorded
    """Stairs as a loaded machine makes them: stalls of up to a second at random, and a
    rate that wanders (the receiver and the hogs share the cores), here slow, then fast."""
    rng = random.Random(seed)
    points, value, behind, stalled_until = [], 0.0, 0.0, 0.0
    for i in range(int(seconds / dt)):
        t = i * dt
        behind += (500.0 if t < seconds / 2 else 4000.0) * dt
        if t >= stalled_until:
            value, behind = value + behind, 0.0
            if rng.random() < 0.3:
                stalled_until = t + rng.uniform(0.3, 1.0)
        points.append((t, value))
    return points


def sawtooth(peak: float, period_s: float, seconds: float = 8.0, dt: float = 0.1):
    """A bounded list that fills to `peak` and drains to nothing, over and over."""
    return [(i * dt, peak * ((i * dt) % period_s) / period_s) for i in range(int(seconds / dt))]


def test_stairs_only_grow() -> None:
    g = growth.growth(stairs(2000.0))
    assert g is not None
    assert g.drawdown == 0
    assert g.only_grows
    assert g.rate == pytest.approx(2000.0, rel=0.2)


@pytest.mark.parametrize("points", [sawtooth(5000, 1.0), sawtooth(40, 0.3)], ids=["big-sawtooth", "small"])
def test_a_list_that_drains_is_not_growing(points) -> None:
    g = growth.growth(points)
    assert g is not None and not g.only_grows


def test_a_list_that_filled_once_and_stayed_is_not_growing() -> None:
    points = [(i * 0.1, min(i, 10) * 1000.0) for i in range(80)]  # full after 1 s, then flat for 7
    g = growth.growth(points)
    assert g is not None and g.gain > 0 and g.drawdown == 0
    assert not g.only_grows


def test_a_small_gain_is_not_orders_of_magnitude_above_the_noise() -> None:
    points = [(i * 0.1, float(i)) for i in range(80)]  # +79 over 8 s: under 100 x the 2 Works of one round
    g = growth.growth(points)
    assert g is not None and not g.only_grows


def test_one_dip_is_noise_a_deep_one_is_not() -> None:
    rising = stairs(2000.0)
    shallow = [(t, v - 50 if 40 <= i < 42 else v) for i, (t, v) in enumerate(rising)]
    deep = [(t, v / 2 if 40 <= i < 42 else v) for i, (t, v) in enumerate(rising)]
    assert growth.growth(shallow).only_grows
    assert not growth.growth(deep).only_grows


def test_too_few_points_say_nothing() -> None:
    assert growth.growth([(0.0, 1.0), (1.0, 100.0)]) is None
    assert growth.growth([(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)]) is None


def test_stairs_are_a_leak_where_the_trend_interval_cannot_tell() -> None:
    """The trend rule alone leaves stairs undecided (the interval's lower end is a flat
    stretch's 0); with the growth rule the verdict is LEAK, from the work list."""
    depth_points = uneven_stairs()
    rss_points = [(t, 3e8 + 1200.0 * v) for t, v in depth_points]
    depth = stats.theil_sen(depth_points)
    inputs = stats.VerdictInputs(
        rss=stats.theil_sen(rss_points, quantum=4096),
        depth=depth,
        final_depth=int(depth_points[-1][1]),
        span_s=depth_points[-1][0],
    )
    assert depth is not None and depth.lo <= stats.DEPTH_GROWTH_FLOOR  # what the trend rule sees
    assert stats.decide(inputs, 100.0).verdict != "LEAK"
    judged = stats.decide(replace(inputs, growth=growth.growth(depth_points)), 100.0)
    assert (judged.verdict, judged.basis) == ("LEAK", "work-list")
    assert "work list only grows" in judged.reason


@pytest.mark.parametrize("run", ["reap-a", "reap-b"])
def test_recorded_reap_runs_under_load_are_leaks(run: str) -> None:
    """Rank 0 of a reap run beside two CPU hogs: its list only rose (in stairs), and the
    trend rule alone called it INCONCLUSIVE; rank 1 holds nothing and is no leak."""
    samples = read_run(RECORDED / run)
    rank0 = assess_rank(samples[0], None, 100.0)
    assert (rank0.verdict.verdict, rank0.verdict.basis) == ("LEAK", "work-list")
    assert rank0.verdict.reason.startswith("work list only grows")
    depth = [s.depth for s in samples[0]]
    assert depth == sorted(depth) and depth[-1] > 10_000
    assert rank0.depth is not None and rank0.depth.lo <= stats.DEPTH_GROWTH_FLOOR  # the trend could not tell
    assert assess_rank(samples[1], None, 100.0).verdict.verdict != "LEAK"


def test_a_recorded_drain_run_under_load_is_bounded() -> None:
    """The same load, --policy drain: the list holds one round's sends and drains; no rank grows."""
    for series in read_run(RECORDED / "drain-a").values():
        judged = assess_rank(series, None, 100.0)
        assert judged.verdict.verdict == "BOUNDED", judged.verdict.reason
        assert not growth.growth([(s.t, float(s.depth)) for s in series]).only_grows


@pytest.mark.parametrize("seed", range(10))
def test_uneven_stairs_only_grow_whatever_the_draw(seed: int) -> None:
    assert growth.growth(uneven_stairs(seed=seed)).only_grows
