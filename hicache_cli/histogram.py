"""A log-scale latency histogram: 20 buckets per decade, exact to about 12%.

Samples carry it cumulatively (sparse, non-empty buckets only), so that a report can
take any window's latency quantiles as the difference of two samples' histograms.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter

BUCKETS_PER_DECADE = 20
_FLOOR_S = 1e-7  # anything faster lands in the first bucket


def bucket_of(seconds: float) -> int:
    return math.floor(math.log10(max(seconds, _FLOOR_S)) * BUCKETS_PER_DECADE)


def bucket_upper_ms(bucket: int) -> float:
    return 10 ** ((bucket + 1) / BUCKETS_PER_DECADE) * 1000.0


class LatencyHistogram:
    def __init__(self, counts: dict[int, int] | None = None) -> None:
        self.counts: Counter[int] = Counter(counts or {})

    def add_all(self, latencies_s: list[float]) -> None:
        self.add_sorted(sorted(latencies_s))

    def add_sorted(self, ordered_s: list[float], weight: int = 1) -> None:
        """Count sorted latencies a bucket at a time (a bisect per bucket, not a log per
        value); each stands for `weight` rounds when they are a strided subsample."""
        i, n = 0, len(ordered_s)
        while i < n:
            bucket = bucket_of(ordered_s[i])
            end = bisect.bisect_left(ordered_s, 10 ** ((bucket + 1) / BUCKETS_PER_DECADE), i)
            end = max(end, i + 1)  # float edges: always make progress
            self.counts[bucket] += (end - i) * weight
            i = end

    def to_json(self) -> dict[str, int]:
        return {str(k): v for k, v in sorted(self.counts.items())}

    @classmethod
    def from_json(cls, data: dict[str, int]) -> LatencyHistogram:
        return cls({int(k): int(v) for k, v in data.items()})

    def minus(self, earlier: LatencyHistogram) -> LatencyHistogram:
        diff = Counter(self.counts)
        diff.subtract(earlier.counts)
        return LatencyHistogram({k: v for k, v in diff.items() if v > 0})

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def quantile_ms(self, q: float) -> float | None:
        """Upper edge of the bucket holding the q-quantile; None when empty."""
        total = self.total
        if total == 0:
            return None
        rank = q * total
        seen = 0
        for bucket in sorted(self.counts):
            seen += self.counts[bucket]
            if seen >= rank:
                return bucket_upper_ms(bucket)
        return bucket_upper_ms(max(self.counts))
