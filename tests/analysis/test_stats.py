"""stats: Theil-Sen trends and the leak verdict, on synthetic series with known answers."""

from __future__ import annotations

import random

import pytest

from hicache_cli.analysis import stats
from hicache_cli.analysis.kinds import Verdict
from hicache_cli.analysis.stats import Trend, VerdictInputs


def line(slope: float, intercept: float = 0.0, n: int = 100, dt: float = 0.1) -> list[tuple[float, float]]:
    return [(i * dt, intercept + slope * i * dt) for i in range(n)]


def bounded_noise(n: int, amplitude: float, seed: int) -> list[float]:
    """n draws of uniform noise in [-amplitude, amplitude], the same on every run."""
    rng = random.Random(seed)
    return [rng.uniform(-amplitude, amplitude) for _ in range(n)]


# Bytes per second for a given MB/h.
def bps(mb_per_h: float) -> float:
    return mb_per_h * stats.MB / 3600.0


# theil_sen


@pytest.mark.parametrize("slope", [3.0, -2.5, 50_000.0])
def test_theil_sen_recovers_the_slope_of_a_noiseless_line(slope: float) -> None:
    trend = stats.theil_sen(line(slope, intercept=1e8))
    assert trend is not None
    assert trend.slope == pytest.approx(slope, rel=1e-9)
    assert trend.lo == pytest.approx(slope, rel=1e-9)
    assert trend.hi == pytest.approx(slope, rel=1e-9)
    assert trend.n == 100


def test_theil_sen_interval_holds_the_true_slope_under_bounded_noise() -> None:
    slope = 50_000.0  # 180 MB/h in bytes per second
    noise = bounded_noise(300, 40_000.0, seed=1)  # one fixed draw; calibration is tested below
    points = [(t, y + e) for (t, y), e in zip(line(slope, 1e8, n=300), noise, strict=True)]
    trend = stats.theil_sen(points)
    assert trend is not None
    assert trend.lo <= slope <= trend.hi
    assert trend.lo < trend.hi  # noise gives a real interval
    assert trend.slope == pytest.approx(slope, rel=0.02)


def test_the_95_percent_interval_is_calibrated() -> None:
    """Over many noisy draws the interval holds the true slope about 95% of the time, and a wrong one rarely."""
    slope, runs = 50_000.0, 100
    held = wrong_held = 0
    for seed in range(runs):
        noise = bounded_noise(100, 40_000.0, seed)
        trend = stats.theil_sen([(t, y + e) for (t, y), e in zip(line(slope, 1e8), noise, strict=True)])
        assert trend is not None
        held += trend.lo <= slope <= trend.hi
        wrong_held += trend.lo <= slope * 1.1 <= trend.hi
    assert 0.85 * runs <= held
    assert wrong_held == 0


def test_flat_series_has_zero_slope_and_an_interval_holding_zero() -> None:
    flat = [(i * 0.1, 1e8) for i in range(50)]
    trend = stats.theil_sen(flat)
    # No residuals: no autocorrelation (n_effective is n), no trend (Z 0, p 1), and without a
    # reading quantum nothing bounds the noise from below, so the floor is 0.
    assert trend == Trend(
        slope=0.0, lo=0.0, hi=0.0, n=50, autocorrelation=0.0, n_effective=50.0, mk_z=0.0, p_value=1.0, floor=0.0
    )
    # With readings in 4096-byte pages, the quantum's noise (4096 / sqrt(12)) sets the floor.
    paged = stats.theil_sen(flat, quantum=4096)
    assert paged is not None
    assert (paged.slope, paged.lo, paged.hi, paged.p_value) == (0.0, 0.0, 0.0, 1.0)
    assert paged.floor == pytest.approx((stats.Z95 + stats.Z80) * 4096 / 50**0.5 / 4.9)

    noisy = [(i * 0.1, 1e8 + e) for i, e in enumerate(bounded_noise(200, 1000.0, seed=1))]
    trend = stats.theil_sen(noisy)
    assert trend is not None
    assert trend.lo <= 0.0 <= trend.hi


def test_theil_sen_shrugs_off_a_few_outliers() -> None:
    slope = 2.0
    points = line(slope, n=100)
    for i in (10, 40, 41, 77):
        t, y = points[i]
        points[i] = (t, y + 1e9)  # wild spikes, e.g. a transient allocation
    trend = stats.theil_sen(points)
    assert trend is not None
    assert trend.slope == pytest.approx(slope, rel=0.01)
    assert trend.lo <= slope <= trend.hi


def test_theil_sen_needs_three_points_at_distinct_times() -> None:
    assert stats.theil_sen([]) is None
    assert stats.theil_sen([(0.0, 1.0), (1.0, 2.0)]) is None
    assert stats.theil_sen([(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)]) is None
    assert stats.theil_sen([(0.0, 0.0), (1.0, 1.0), (2.0, 2.0)]) is not None


def test_theil_sen_thins_long_series() -> None:
    trend = stats.theil_sen(line(1.0, n=5000))
    assert trend is not None
    assert trend.n == stats.MAX_POINTS
    assert trend.slope == pytest.approx(1.0)


# thin


def test_thin_keeps_short_series_whole() -> None:
    points = line(1.0, n=10)
    assert stats.thin(points, max_points=10) == points
    assert stats.thin(points, max_points=50) == points


@pytest.mark.parametrize("n", [11, 201, 399, 400, 1000, 12345])
def test_thin_keeps_first_and_last_and_caps_length(n: int) -> None:
    points = line(1.0, n=n)
    thinned = stats.thin(points)
    assert len(thinned) == min(n, stats.MAX_POINTS)
    assert thinned[0] == points[0]
    assert thinned[-1] == points[-1]
    assert [t for t, _ in thinned] == sorted({t for t, _ in thinned})  # in order, no repeats


# decide


def trend(per_s: float, lo: float | None = None, hi: float | None = None, n: int = 100) -> Trend:
    return Trend(slope=per_s, lo=per_s if lo is None else lo, hi=per_s if hi is None else hi, n=n)


FLAT = trend(0.0)
THRESHOLD = 100.0  # MB/h


def test_a_growing_work_list_is_a_leak_whatever_rss_says() -> None:
    verdict = stats.decide(
        VerdictInputs(rss=FLAT, depth=trend(900.0, 880.0, 920.0), final_depth=9000, span_s=10.0), THRESHOLD
    )
    assert verdict.verdict == "LEAK"
    assert "work list" in verdict.reason
    assert "9000" in verdict.reason


def test_a_small_gain_is_not_growth() -> None:
    # A rising interval alone is not enough: the trend must add up to DEPTH_MIN_GAIN Works.
    gain_short = stats.DEPTH_MIN_GAIN / 10.0 - 0.1  # Works/s over the 10 s window
    depth = trend(gain_short, gain_short - 0.2, gain_short + 0.2)
    verdict = stats.decide(VerdictInputs(rss=FLAT, depth=depth, final_depth=15, span_s=10.0), THRESHOLD)
    assert verdict.verdict == "BOUNDED"


def test_a_slow_steady_gain_is_a_leak() -> None:
    # 1.9 Works/s kept for 30 s (an injected keep:0:1000): 57 Works, never released.
    depth = trend(1.9, 1.8, 2.0)
    verdict = stats.decide(VerdictInputs(rss=FLAT, depth=depth, final_depth=57, span_s=30.0), THRESHOLD)
    assert verdict.verdict == "LEAK"
    assert verdict.basis == "work-list"


def test_rss_interval_wholly_above_the_threshold_is_a_leak() -> None:
    rss = trend(bps(200.0), bps(150.0), bps(250.0))
    verdict = stats.decide(VerdictInputs(rss=rss, depth=FLAT, final_depth=1, span_s=10.0), THRESHOLD)
    assert verdict.verdict == "LEAK"
    assert "above 100 MB/h" in verdict.reason
    assert "+200 MB/h" in verdict.reason


def test_rss_interval_wholly_below_the_threshold_is_bounded() -> None:
    rss = trend(bps(10.0), bps(-20.0), bps(50.0))
    verdict = stats.decide(VerdictInputs(rss=rss, depth=FLAT, final_depth=1, span_s=10.0), THRESHOLD)
    assert verdict.verdict == "BOUNDED"
    assert "below 100 MB/h" in verdict.reason


def test_rss_interval_straddling_the_threshold_is_inconclusive() -> None:
    rss = trend(bps(100.0), bps(50.0), bps(150.0))
    verdict = stats.decide(VerdictInputs(rss=rss, depth=FLAT, final_depth=1, span_s=10.0), THRESHOLD)
    assert verdict.verdict == "INCONCLUSIVE"
    assert "straddles" in verdict.reason


@pytest.mark.parametrize(
    "inputs",
    [
        VerdictInputs(rss=None, depth=FLAT, final_depth=0, span_s=10.0),
        VerdictInputs(rss=FLAT, depth=None, final_depth=0, span_s=10.0),
        VerdictInputs(rss=FLAT, depth=FLAT, final_depth=0, span_s=stats.MIN_SPAN_S - 0.1),
        VerdictInputs(rss=trend(0.0, n=stats.MIN_POINTS - 1), depth=FLAT, final_depth=0, span_s=10.0),
        # Even a huge slope decides nothing on too little data.
        VerdictInputs(rss=trend(bps(1e6), n=5), depth=trend(1e4), final_depth=10**6, span_s=0.5),
    ],
    ids=["no-rss", "no-depth", "short-span", "few-points", "short-but-steep"],
)
def test_too_little_data_is_inconclusive(inputs: VerdictInputs) -> None:
    verdict = stats.decide(inputs, THRESHOLD)
    assert verdict.verdict == "INCONCLUSIVE"
    assert "too little data" in verdict.reason


def test_the_threshold_is_the_callers() -> None:
    rss = trend(bps(50.0), bps(40.0), bps(60.0))
    inputs = VerdictInputs(rss=rss, depth=FLAT, final_depth=0, span_s=10.0)
    assert stats.decide(inputs, 100.0).verdict == "BOUNDED"
    assert stats.decide(inputs, 10.0).verdict == "LEAK"


def test_per_hour_mb() -> None:
    assert stats.per_hour_mb(1_000_000 / 3600) == pytest.approx(1.0)
    assert stats.per_hour_mb(0.0) == 0.0


# overall


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        (["LEAK", "BOUNDED"], "LEAK"),
        (["INCONCLUSIVE", "LEAK"], "LEAK"),
        (["BOUNDED", "BOUNDED"], "BOUNDED"),
        (["BOUNDED"], "BOUNDED"),
        (["BOUNDED", "INCONCLUSIVE"], "INCONCLUSIVE"),
        (["INCONCLUSIVE"], "INCONCLUSIVE"),
        ([], "INCONCLUSIVE"),
    ],
)
def test_overall(verdicts: list[str], expected: str) -> None:
    assert Verdict.overall(verdicts) == expected


def test_intercept_is_where_the_trend_crosses_zero() -> None:
    points = [(t, 5.0 + 2.0 * t + (0.5 if t == 3 else 0.0)) for t in range(1, 8)]  # one point off the line
    assert stats.intercept(points, 2.0) == 5.0
