"""Pure statistics over sample series: robust trends and the leak verdict.

No I/O and no torch: functions of numbers, tested on synthetic series with known answers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

Z95 = 1.959964
MAX_POINTS = 200  # Theil-Sen is O(n^2); thinning also tempers autocorrelation


@dataclass(frozen=True)
class Trend:
    """A Theil-Sen slope (units per second) and its 95% confidence interval."""

    slope: float
    lo: float
    hi: float
    n: int


def thin(points: list[T], max_points: int = MAX_POINTS) -> list[T]:
    """Evenly spaced subset of at most `max_points`, first and last kept."""
    n = len(points)
    if n <= max_points:
        return list(points)
    if max_points == 1:
        return [points[-1]]
    step = (n - 1) / (max_points - 1)
    return [points[round(i * step)] for i in range(max_points)]


def theil_sen(points: list[tuple[float, float]]) -> Trend | None:
    """Median of pairwise slopes, with Sen's (1968) distribution-free 95% interval.

    None when fewer than 3 points with distinct times.
    """
    pts = thin(points)
    slopes = sorted((y2 - y1) / (t2 - t1) for i, (t1, y1) in enumerate(pts) for (t2, y2) in pts[i + 1 :] if t2 != t1)
    n, m = len(pts), len(slopes)
    if n < 3 or m < 3:
        return None
    c = Z95 * math.sqrt(n * (n - 1) * (2 * n + 5) / 18.0)
    # Sen's limits are the M1-th and (M2+1)-th ordered slopes (1-based), rounded outward.
    lo_i = max(0, int(math.floor((m - c) / 2.0)) - 1)
    hi_i = min(m - 1, int(math.ceil((m + c) / 2.0)))
    return Trend(slope=_median(slopes), lo=slopes[lo_i], hi=slopes[hi_i], n=n)


def _median(ordered: list[float]) -> float:
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def warmup_for(duration_s: float) -> float:
    """Default warm-up excluded from trends: a fifth of the run, between 1 and 10 s."""
    return min(10.0, max(1.0, duration_s / 5.0))


@dataclass(frozen=True)
class VerdictInputs:
    rss: Trend | None  # bytes per second, after warm-up
    depth: Trend | None  # Works per second, after warm-up
    final_depth: int
    span_s: float  # seconds of post-warm-up data


@dataclass(frozen=True)
class Verdict:
    verdict: str  # "LEAK" | "BOUNDED" | "INCONCLUSIVE"
    reason: str


MB = 1_000_000.0
MIN_SPAN_S = 2.0
MIN_POINTS = 8
# Depth is growing when its whole interval is above this many Works per second and
# the list ends long: one round's sends never make a list of 64.
DEPTH_GROWTH_FLOOR = 0.5
DEPTH_LONG = 64


def per_hour_mb(bytes_per_s: float) -> float:
    return bytes_per_s * 3600.0 / MB


def decide(inputs: VerdictInputs, leak_threshold_mb_per_h: float) -> Verdict:
    """LEAK / BOUNDED / INCONCLUSIVE for one rank, with the reason in words.

    Work-list growth is the causal signal: a list that keeps growing is a leak whatever
    RSS shows so far. Otherwise RSS decides when its 95% interval lies wholly above
    (LEAK) or below (BOUNDED) the threshold; an interval that straddles it cannot decide.
    """
    rss, depth = inputs.rss, inputs.depth
    if rss is None or depth is None or inputs.span_s < MIN_SPAN_S or rss.n < MIN_POINTS:
        return Verdict("INCONCLUSIVE", f"too little data after warm-up ({inputs.span_s:.1f} s)")
    rss_text = f"RSS {per_hour_mb(rss.slope):+.0f} MB/h [95% {per_hour_mb(rss.lo):+.0f}, {per_hour_mb(rss.hi):+.0f}]"
    if depth.lo > DEPTH_GROWTH_FLOOR and inputs.final_depth > DEPTH_LONG:
        return Verdict(
            "LEAK",
            f"work list grows {depth.slope:.0f} Works/s (final {inputs.final_depth}); {rss_text}",
        )
    threshold = leak_threshold_mb_per_h
    if per_hour_mb(rss.lo) > threshold:
        return Verdict("LEAK", f"{rss_text} is above {threshold:.0f} MB/h; work list not growing")
    if per_hour_mb(rss.hi) < threshold:
        return Verdict(
            "BOUNDED", f"{rss_text} is below {threshold:.0f} MB/h; work list bounded (final {inputs.final_depth})"
        )
    return Verdict("INCONCLUSIVE", f"{rss_text} straddles {threshold:.0f} MB/h; work list not growing")


def overall(verdicts: list[str]) -> str:
    if "LEAK" in verdicts:
        return "LEAK"
    if verdicts and all(v == "BOUNDED" for v in verdicts):
        return "BOUNDED"
    return "INCONCLUSIVE"
