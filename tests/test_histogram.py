"""histogram: the log-scale latency histogram samples carry."""

from __future__ import annotations

import math

import pytest

from hicache_cli.histogram import BUCKETS_PER_DECADE, LatencyHistogram, bucket_of, bucket_upper_ms

BUCKET_RATIO = 10 ** (1 / BUCKETS_PER_DECADE)  # about 1.122: the histogram's resolution


def test_bucket_of_is_monotone() -> None:
    xs = [10 ** (k / 37) for k in range(-37 * 8, 37 * 2)]  # 1e-8 s .. 100 s
    buckets = [bucket_of(x) for x in xs]
    assert buckets == sorted(buckets)
    assert len(set(buckets)) > 150


def test_a_value_lies_below_its_buckets_upper_edge() -> None:
    for x in (1e-6, 3.3e-5, 0.001, 0.0123, 0.5, 7.0):
        upper_ms = bucket_upper_ms(bucket_of(x))
        assert x * 1000 < upper_ms <= x * 1000 * BUCKET_RATIO * (1 + 1e-9)


def test_anything_faster_than_the_floor_lands_in_the_first_bucket() -> None:
    assert bucket_of(0.0) == bucket_of(1e-7) == bucket_of(1e-12)


def log_uniform(n: int, lo_s: float, hi_s: float) -> list[float]:
    """n latencies spread evenly in log space between lo_s and hi_s (deterministic)."""
    span = math.log10(hi_s / lo_s)
    return [lo_s * 10 ** (span * ((i * 0.6180339887) % 1.0)) for i in range(n)]


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_quantile_is_within_about_12_percent(q: float) -> None:
    latencies = log_uniform(10_000, 1e-4, 0.05)
    hist = LatencyHistogram()
    hist.add_all(latencies)
    true_ms = sorted(latencies)[math.ceil(q * len(latencies)) - 1] * 1000
    got = hist.quantile_ms(q)
    assert got is not None
    # The upper edge of the bucket holding the quantile: never below it, at most one bucket above.
    assert true_ms <= got <= true_ms * BUCKET_RATIO * (1 + 1e-9)
    assert got == pytest.approx(true_ms, rel=0.125)


def test_quantile_of_an_empty_histogram_is_none() -> None:
    assert LatencyHistogram().quantile_ms(0.5) is None
    assert LatencyHistogram().total == 0


def test_quantiles_of_two_clusters() -> None:
    hist = LatencyHistogram()
    hist.add_all([0.001] * 98 + [0.1] * 2)
    p50, p99 = hist.quantile_ms(0.5), hist.quantile_ms(0.99)
    assert p50 is not None and p99 is not None
    assert 1.0 <= p50 <= 1.0 * BUCKET_RATIO * (1 + 1e-9)
    assert 100.0 <= p99 <= 100.0 * BUCKET_RATIO * (1 + 1e-9)


def test_minus_takes_the_window_between_two_cumulative_histograms() -> None:
    earlier = LatencyHistogram()
    earlier.add_all([0.01] * 50 + [0.001] * 5)
    later = LatencyHistogram(dict(earlier.counts))
    later.add_all([0.001] * 20 + [1.0] * 3)

    window = later.minus(earlier)
    assert window.total == 23
    assert window.counts == {bucket_of(0.001): 20, bucket_of(1.0): 3}
    assert bucket_of(0.01) not in window.counts  # no zero buckets left behind
    assert later.minus(later).total == 0
    assert later.total == 78  # the operands are not changed
    assert earlier.total == 55


def test_json_round_trip() -> None:
    hist = LatencyHistogram()
    hist.add_all([0.0002, 0.0002, 0.003, 0.04, 0.04, 0.04])
    data = hist.to_json()
    assert all(isinstance(k, str) for k in data)  # JSON object keys
    back = LatencyHistogram.from_json(data)
    assert back.counts == hist.counts
    assert back.to_json() == data
    assert LatencyHistogram.from_json({}).total == 0


def test_counting_sorted_values_a_bucket_at_a_time_matches_counting_each() -> None:
    import random
    from collections import Counter

    rng = random.Random(7)
    values = [rng.lognormvariate(-7, 2) for _ in range(20_000)] + [0.0, 1e-9, 10 ** (3 / 20)]
    histogram = LatencyHistogram()
    histogram.add_all(values)
    assert dict(histogram.counts) == dict(Counter(bucket_of(x) for x in values))
