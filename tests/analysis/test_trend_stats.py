"""The verdict statistics' newer parts on synthetic series with known answers: Sen's interval
widened for autocorrelation, the Mann-Kendall test, the detection floor, the end of the
start-up transient (plateau_start), INCONCLUSIVE when the floor is too high, and assess_rank
with an automatic warm-up and bytes per Work."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import pytest

from hicache_cli.analysis import stats
from hicache_cli.analysis.assess import assess_rank
from hicache_cli.analysis.stats import Trend, VerdictInputs
from hicache_cli.sample import Sample
from tests.conftest import build_sample

MakeSeries = Callable[..., list[Sample]]

N, DT = 200, 0.1  # 200 points over 20 s
SEEDS = 100


def ar1(n: int, phi: float, sigma: float, seed: int) -> list[float]:
    """AR(1) noise e[i] = phi e[i-1] + N(0, sigma), started from its stationary distribution."""
    rng = random.Random(seed)
    e = rng.gauss(0.0, sigma / math.sqrt(1.0 - phi * phi))
    out = []
    for _ in range(n):
        out.append(e)
        e = phi * e + rng.gauss(0.0, sigma)
    return out


def white(n: int, sigma: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(0.0, sigma) for _ in range(n)]


def series(slope: float, noise: list[float], dt: float = DT, intercept: float = 100.0) -> list[tuple[float, float]]:
    return [(i * dt, intercept + slope * i * dt + e) for i, e in enumerate(noise)]


def uncorrected_sen_interval(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Sen's textbook 95% interval (inflation 1), from the same pairwise slopes theil_sen uses.

    The points are evenly spaced, so the slopes are built lag by lag (fast); the ranks are
    stats.theil_sen's, with the variance of Kendall's S left as for independent noise.
    """
    ys = [y for _, y in points]
    dt = points[1][0] - points[0][0]
    n = len(ys)
    slopes: list[float] = []
    for k in range(1, n):
        per_s = 1.0 / (k * dt)
        slopes.extend([(b - a) * per_s for a, b in zip(ys, ys[k:], strict=False)])
    slopes.sort()
    m = len(slopes)
    c = stats.Z95 * math.sqrt(n * (n - 1) * (2 * n + 5) / 18.0)
    lo_i = max(0, int(math.floor((m - c) / 2.0)) - 1)
    hi_i = min(m - 1, int(math.ceil((m + c) / 2.0)))
    return slopes[lo_i], slopes[hi_i]


# -- (a) Sen's interval under AR(1) noise ---------------------------------------------

PHI, SLOPE = 0.8, 5.0


@dataclass(frozen=True)
class Coverage:
    corrected: int  # seeds whose widened interval held the true slope
    uncorrected: int  # ... whose textbook interval did
    r1: list[float]  # the lag-1 autocorrelation each seed's residuals showed


@cache
def ar1_coverage() -> Coverage:
    corrected = uncorrected = 0
    r1 = []
    for seed in range(SEEDS):
        points = series(SLOPE, ar1(N, PHI, 1.0, seed))
        trend = stats.theil_sen(points)
        assert trend is not None
        assert trend.n == N
        corrected += trend.lo <= SLOPE <= trend.hi
        lo, hi = uncorrected_sen_interval(points)
        assert lo >= trend.lo - 1e-9 and hi <= trend.hi + 1e-9  # widening only ever widens (float-tolerant)
        uncorrected += lo <= SLOPE <= hi
        r1.append(trend.autocorrelation)
    return Coverage(corrected, uncorrected, r1)


def test_the_widened_interval_holds_the_true_slope_under_ar1_noise() -> None:
    coverage = ar1_coverage()
    assert coverage.corrected >= 0.85 * SEEDS
    # The textbook interval is far too narrow for noise this correlated (about 4 in 10 hold it).
    assert coverage.uncorrected <= 0.6 * SEEDS
    assert coverage.corrected - coverage.uncorrected >= 0.3 * SEEDS


def test_the_lag1_autocorrelation_of_the_residuals_estimates_phi() -> None:
    r1 = ar1_coverage().r1
    assert statistics.mean(abs(r - PHI) for r in r1) < 0.2
    assert all(0.0 <= r <= 0.95 for r in r1)  # clamped


def test_white_noise_is_not_inflated() -> None:
    r1 = []
    for seed in range(20):
        trend = stats.theil_sen(series(SLOPE, white(100, 1.0, seed)))
        assert trend is not None
        r1.append(trend.autocorrelation)
        assert trend.n_effective == pytest.approx(trend.n * (1 - trend.autocorrelation) / (1 + trend.autocorrelation))
    assert statistics.mean(r1) < 0.15


def test_negative_autocorrelation_is_clamped_to_zero() -> None:
    alternating = [(i * DT, 100.0 + (1.0 if i % 2 else -1.0)) for i in range(50)]
    assert stats.lag1_autocorrelation([y for _, y in alternating]) < -0.9
    trend = stats.theil_sen(alternating)
    assert trend is not None
    assert trend.autocorrelation == 0.0
    assert trend.n_effective == trend.n


# -- (b) Mann-Kendall ----------------------------------------------------------------


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_clear_trend_is_significant(sign: float) -> None:
    for seed in range(5):
        # 1 unit/s over 10 s against noise of sd 1, correlated as 100 ms samples are
        trend = stats.theil_sen(series(sign * 1.0, ar1(100, 0.5, 1.0, seed)))
        assert trend is not None
        assert trend.p_value < 0.01
        assert math.copysign(1.0, trend.mk_z) == sign


def test_white_noise_is_not_a_trend() -> None:
    quiet = 0
    for seed in range(SEEDS):
        trend = stats.theil_sen(series(0.0, white(60, 1.0, seed)))
        assert trend is not None
        assert 0.0 <= trend.p_value <= 1.0
        quiet += trend.p_value > 0.05
    assert quiet >= 0.9 * SEEDS


def test_correlated_noise_without_a_trend_is_rarely_a_trend() -> None:
    """Wandering AR(1) noise looks like a trend to the textbook test; the inflated variance knows better."""
    quiet = 0
    for seed in range(30):
        trend = stats.theil_sen(series(0.0, ar1(100, PHI, 1.0, seed)))
        assert trend is not None
        quiet += trend.p_value > 0.05
    assert quiet >= 0.8 * 30


# -- (c) the detection floor ----------------------------------------------------------


def test_the_floor_shrinks_as_the_run_gets_longer() -> None:
    noise = white(400, 1000.0, seed=3)
    short = stats.theil_sen(series(0.0, noise[:100]))  # 10 s at 10 Hz
    long = stats.theil_sen(series(0.0, noise))  # 40 s (thinned to 200 points)
    assert short is not None and long is not None
    assert 0.0 < long.floor
    assert long.floor * 4.0 <= short.floor


def test_the_floor_grows_with_the_noise() -> None:
    noise = white(200, 1000.0, seed=4)
    quiet = stats.theil_sen(series(10.0, noise))
    loud = stats.theil_sen(series(10.0, [2.0 * e for e in noise]))
    assert quiet is not None and loud is not None
    assert loud.floor == pytest.approx(2.0 * quiet.floor, rel=1e-6)  # the residuals scale exactly
    assert loud.autocorrelation == pytest.approx(quiet.autocorrelation, abs=1e-9)


def test_the_floor_is_the_textbook_power_formula() -> None:
    """(z95 + z80) * sigma * sqrt(12 / n) / span: with uncorrelated noise of known spread."""
    noise = white(200, 1000.0, seed=5)
    trend = stats.theil_sen(series(0.0, noise))
    assert trend is not None
    # the noise's sd is 1000; the MAD-based estimate of it is within 25%
    assert trend.floor == pytest.approx(
        (stats.Z95 + stats.Z80) * 1000.0 * math.sqrt(12.0 / trend.n_effective) / 19.9, rel=0.25
    )


def test_the_quantum_bounds_the_noise_of_a_perfectly_flat_series() -> None:
    flat = [(i * DT, 1e8) for i in range(100)]
    without = stats.theil_sen(flat)
    paged = stats.theil_sen(flat, quantum=4096)
    assert without is not None and paged is not None
    assert without.floor == 0.0
    span = 99 * DT
    assert paged.floor == pytest.approx((stats.Z95 + stats.Z80) * (4096 / math.sqrt(12)) * math.sqrt(12 / 100) / span)
    # Noise well above the quantum is what it is: the quantum does not raise it.
    noisy = series(0.0, white(100, 100_000.0, seed=6))
    loud, loud_paged = stats.theil_sen(noisy), stats.theil_sen(noisy, quantum=4096)
    assert loud is not None and loud_paged is not None
    assert loud_paged.floor == loud.floor > paged.floor


# -- (d) plateau_start ------------------------------------------------------------------


def ramp_then_flat(
    ramp_s: float, total_s: float, rate: float, noise: float = 0.0, seed: int = 0
) -> list[tuple[float, float]]:
    """At 10 Hz: rising `rate` units/s for `ramp_s`, then flat, plus uniform noise."""
    rng = random.Random(seed)
    return [
        (t, 1e8 + rate * min(t, ramp_s) + rng.uniform(-noise, noise))
        for t in (round(i * DT, 4) for i in range(int(total_s / DT)))
    ]


@pytest.mark.parametrize("noise", [0.0, 4096.0])
def test_the_plateau_starts_where_a_steep_rise_ends(noise: float) -> None:
    points = ramp_then_flat(5.0, 30.0, rate=2e6, noise=noise)
    start = stats.plateau_start(points, 1.0, 15.0, floor=10_000.0)
    assert 4.5 <= start <= 6.0


def test_a_steady_line_has_no_transient() -> None:
    points = series(50_000.0, white(300, 4096.0, seed=7), intercept=1e8)
    assert stats.plateau_start(points, 1.0, 15.0, floor=10_000.0) == 1.0


def test_a_flat_series_has_no_transient() -> None:
    points = [(i * DT, 1e8) for i in range(300)]
    assert stats.plateau_start(points, 1.0, 15.0, floor=10_000.0) == 1.0
    assert stats.plateau_start(points, 2.5, 15.0, floor=0.0) == 2.5


@pytest.mark.parametrize("max_s", [3.0, 7.5, 10.0])
def test_the_plateau_never_starts_past_max_s(max_s: float) -> None:
    points = ramp_then_flat(20.0, 30.0, rate=2e6)  # still rising at max_s
    assert stats.plateau_start(points, 1.0, max_s, floor=10_000.0) == max_s


def test_too_few_points_for_a_plateau_start_at_min_s() -> None:
    points = ramp_then_flat(5.0, 0.7, rate=2e6)
    assert stats.plateau_start(points, 1.0, 15.0, floor=10_000.0) == 1.0


# -- (e) decide with a floor at or above the threshold ------------------------------------

THRESHOLD = 36.0  # MB/h: 10 000 bytes/s exactly


def verdict_for(rss: Trend) -> stats.Verdict:
    depth = Trend(slope=0.0, lo=0.0, hi=0.0, n=100)
    return stats.decide(VerdictInputs(rss=rss, depth=depth, final_depth=0, span_s=30.0), THRESHOLD)


@pytest.mark.parametrize("floor", [10_000.0, 20_000.0])
def test_an_interval_below_the_threshold_is_inconclusive_when_the_floor_is_not(floor: float) -> None:
    rss = Trend(slope=0.0, lo=-1000.0, hi=1000.0, n=100, floor=floor)
    verdict = verdict_for(rss)
    assert verdict.verdict == "INCONCLUSIVE"
    assert "run longer" in verdict.reason
    assert f"{stats.per_hour_mb(floor):.0f} MB/h" in verdict.reason


def test_a_floor_just_below_the_threshold_lets_bounded_stand() -> None:
    rss = Trend(slope=0.0, lo=-1000.0, hi=1000.0, n=100, floor=9_999.0)
    assert verdict_for(rss).verdict == "BOUNDED"


def test_a_leak_above_the_floor_is_still_a_leak() -> None:
    rss = Trend(slope=50_000.0, lo=40_000.0, hi=60_000.0, n=100, floor=20_000.0)
    assert verdict_for(rss).verdict == "LEAK"


# -- (f) assess_rank: the automatic warm-up and bytes per Work ------------------------------

RAMP_S, RAMP_RATE = 5.0, 2e6  # 2 MB/s for 5 s, then flat


def ramping_rank(n: int = 600, seed: int = 8) -> list[Sample]:
    """A rank whose RSS rises 10 MB in its first 5 s, then holds (within a page or two)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = round((i + 1) * DT, 4)
        rss = 1e8 + RAMP_RATE * min(t, RAMP_S) + rng.uniform(-8192, 8192)
        out.append(build_sample(0, t, rss_bytes=int(rss), kind="final" if i == n - 1 else "sample"))
    return out


def test_the_automatic_warm_up_ends_where_the_rss_ramp_does() -> None:
    series_ = ramping_rank()
    auto = assess_rank(series_, None, 100.0)
    assert 4.5 <= auto.warmup_s <= 6.0
    assert series_[auto.cut].t >= auto.warmup_s > series_[auto.cut - 1].t
    assert auto.verdict.verdict == "BOUNDED"
    assert auto.rss is not None
    assert auto.rss.lo <= 0.0 <= auto.rss.hi
    assert auto.bytes_per_work is None  # the work list never grew

    fixed = assess_rank(series_, 1.0, 100.0)  # a warm-up the user gave is kept as given
    assert fixed.warmup_s == 1.0
    assert fixed.rss is not None
    assert fixed.rss.slope > auto.rss.slope  # the ramp's tail pulls the trend up


def test_the_automatic_warm_up_never_takes_more_than_half_the_data() -> None:
    series_ = ramping_rank(n=80)  # 8 s: the ramp ends after the first half
    assert assess_rank(series_, None, 100.0).warmup_s == 4.0


def test_a_ramp_that_fills_the_second_half_is_a_steady_leak() -> None:
    """Rising all through the second half, the ramp is the long-run slope: no transient to cut."""
    series_ = ramping_rank(n=60)  # 6 s: rising until 5 s
    assessment = assess_rank(series_, None, 100.0)
    assert assessment.warmup_s == 1.0
    assert assessment.verdict.verdict == "LEAK"


def test_bytes_per_work_is_the_rss_slope_over_the_depth_slope(make_series: MakeSeries) -> None:
    rank = make_series(0, n=300, rss_per_s=150_000.0, rss_noise=40_000.0, depth_per_s=2000.0, sent_per_s=2000.0)
    assessment = assess_rank(rank, None, 100.0)
    assert assessment.verdict.verdict == "LEAK"
    assert assessment.bytes_per_work == pytest.approx(150_000.0 / 2000.0, rel=0.05)


@pytest.mark.parametrize("depth_per_s", [0.0, 10.0])  # flat, or 300 Works in 30 s: not thousands
def test_no_bytes_per_work_without_list_growth(make_series: MakeSeries, depth_per_s: float) -> None:
    rank = make_series(0, n=300, rss_per_s=150_000.0, rss_noise=40_000.0, depth_per_s=depth_per_s)
    assert assess_rank(rank, None, 100.0).bytes_per_work is None


def test_a_start_up_drop_is_a_transient_too() -> None:
    # RSS falls 20 MB over the first 5 s (a released start-up buffer), then leaks 50 kB/s.
    points = [(i / 10, 1e8 - 4e6 * min(i / 10, 5.0) + 5e4 * max(0.0, i / 10 - 5.0)) for i in range(300)]
    start = stats.plateau_start(points, 1.0, 15.0, floor=13_889.0)
    assert 4.5 <= start <= 6.0
