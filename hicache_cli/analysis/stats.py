"""Pure statistics over sample series: robust trends and the leak verdict.

No I/O and no torch: functions of numbers, tested on synthetic series with known answers.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import TypeVar

from hicache_cli.analysis.growth import Growth
from hicache_cli.analysis.kinds import Verdict

T = TypeVar("T")

Z95 = 1.959964
MAX_POINTS = 200  # Theil-Sen is O(n^2); thinning also tempers autocorrelation


@dataclass(frozen=True)
class Trend:
    """A Theil-Sen slope (units per second) with its 95% interval, widened for
    autocorrelation, plus the Mann-Kendall trend test and the run's detection floor."""

    slope: float
    lo: float
    hi: float
    n: int
    autocorrelation: float = 0.0  # lag-1, of the residuals around the trend
    n_effective: float = 0.0  # n shrunk by the autocorrelation
    mk_z: float = 0.0  # Mann-Kendall Z, with the variance inflated for autocorrelation
    p_value: float = 1.0  # two-sided, for "there is a trend"
    floor: float = 0.0  # smallest slope this data could have detected (80% power, 5% level)


Z80 = 0.841621  # one-sided z for 80% power


def thin(points: list[T], max_points: int = MAX_POINTS) -> list[T]:
    """Evenly spaced subset of at most `max_points`, first and last kept."""
    n = len(points)
    if n <= max_points:
        return list(points)
    if max_points == 1:
        return [points[-1]]
    step = (n - 1) / (max_points - 1)
    return [points[round(i * step)] for i in range(max_points)]


def theil_sen(points: list[tuple[float, float]], quantum: float = 0.0) -> Trend | None:
    """Median of pairwise slopes, with Sen's (1968) distribution-free 95% interval.

    Samples taken 100 ms apart are not independent: the residuals around the trend are
    autocorrelated, which makes the textbook interval too narrow. The variance of
    Kendall's S is inflated by (1 + r1) / (1 - r1), r1 the lag-1 autocorrelation of the
    residuals (Yue and Wang's correction for AR(1) noise), and both the interval and the
    Mann-Kendall test use it. `quantum` is the resolution of the readings (4096 for RSS,
    a page) and bounds the noise from below. None when fewer than 3 distinct times.
    """
    pts = thin(points)
    slopes = sorted((y2 - y1) / (t2 - t1) for i, (t1, y1) in enumerate(pts) for (t2, y2) in pts[i + 1 :] if t2 != t1)
    n, m = len(pts), len(slopes)
    if n < 3 or m < 3:
        return None
    slope = _median(slopes)
    at_zero = intercept(pts, slope)
    residuals = [y - (at_zero + slope * t) for t, y in pts]
    r1 = min(max(lag1_autocorrelation(residuals), 0.0), 0.95)
    inflation = (1.0 + r1) / (1.0 - r1)
    var_s = n * (n - 1) * (2 * n + 5) / 18.0 * inflation
    c = Z95 * math.sqrt(var_s)
    # Sen's limits are the M1-th and (M2+1)-th ordered slopes (1-based), rounded outward.
    lo_i = max(0, int(math.floor((m - c) / 2.0)) - 1)
    hi_i = min(m - 1, int(math.ceil((m + c) / 2.0)))
    s_stat = sum(_sign(y2 - y1) for i, (_, y1) in enumerate(pts) for (_, y2) in pts[i + 1 :])
    z = (s_stat - _sign(s_stat)) / math.sqrt(var_s) if s_stat else 0.0
    n_eff = max(2.0, n / inflation)
    span = pts[-1][0] - pts[0][0]
    noise = max(1.4826 * _median(sorted(abs(r) for r in residuals)), quantum / math.sqrt(12.0))
    floor = (Z95 + Z80) * noise * math.sqrt(12.0 / n_eff) / span if span > 0 else math.inf
    return Trend(slope, slopes[lo_i], slopes[hi_i], n, r1, n_eff, z, _two_sided_p(z), floor)


def intercept(points: list[tuple[float, float]], slope: float) -> float:
    """Where a line of `slope` through `points` crosses t = 0: the median of y - slope t, as
    Theil-Sen fits it (the page draws a verdict's trend with it)."""
    return _median(sorted(y - slope * t for t, y in points))


def lag1_autocorrelation(values: list[float]) -> float:
    n = len(values)
    if n < 3:
        return 0.0
    mean = sum(values) / n
    dev = [v - mean for v in values]
    denom = sum(d * d for d in dev)
    if denom == 0:
        return 0.0
    return sum(dev[i] * dev[i + 1] for i in range(n - 1)) / denom


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def _two_sided_p(z: float) -> float:
    return math.erfc(abs(z) / math.sqrt(2.0))


def plateau_start(points: list[tuple[float, float]], min_s: float, max_s: float, floor: float) -> float:
    """Where the start-up transient ends: the first window from `min_s` on whose slope is
    within twice the long-run slope (that of the second half) of it, or twice `floor`
    units/s if that is larger: a climb or a drop well off the long run is a transient. A steady
    leak has none and gets `min_s`; a process whose RSS jumps, then settles, gets the time
    it settled. Never past `max_s`. A window is 1 s, stepped by 0.5 s; where the points lie
    sparser (a thinned history, a slow probe) it widens to hold three of them."""
    if len(points) < 8:
        return min_s
    tail = theil_sen(points[len(points) // 2 :])
    long_run = tail.slope if tail else 0.0
    allowed = 2.0 * max(abs(long_run), floor)  # a climb or a drop this far off the long run is transient
    window = max(1.0, 3.0 * (points[-1][0] - points[0][0]) / (len(points) - 1))
    slopes = _WindowSlopes(points)
    start = min_s
    while start < max_s:
        slope = slopes.between(start, start + window)
        if slope is not None and abs(slope - long_run) <= allowed:
            return start
        start += window / 2.0
    return max_s


class _WindowSlopes:
    """Least-squares slopes of any time window in O(log n), from running sums (centred on the
    first point, so that long runs' large times and values keep their precision)."""

    def __init__(self, points: list[tuple[float, float]]) -> None:
        t0, y0 = points[0]
        self.times = [t for t, _ in points]
        self.sums = [(0, 0.0, 0.0, 0.0, 0.0)]
        n, st, sy, stt, sty = 0, 0.0, 0.0, 0.0, 0.0
        for t, y in points:
            t, y = t - t0, y - y0
            n, st, sy, stt, sty = n + 1, st + t, sy + y, stt + t * t, sty + t * y
            self.sums.append((n, st, sy, stt, sty))

    def between(self, start: float, end: float) -> float | None:
        """Slope of the points with start <= t < end; None with fewer than 3 (or one time)."""
        lo, hi = bisect.bisect_left(self.times, start), bisect.bisect_left(self.times, end)
        n = hi - lo
        if n < 3:
            return None
        a, b = self.sums[lo], self.sums[hi]
        st, sy, stt, sty = b[1] - a[1], b[2] - a[2], b[3] - a[3], b[4] - a[4]
        var_t = stt - st * st / n
        if var_t <= 1e-12 * max(1.0, stt):
            return None
        return (sty - st * sy / n) / var_t


def _median(ordered: list[float]) -> float:
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


@dataclass(frozen=True)
class VerdictInputs:
    rss: Trend | None  # bytes per second, after warm-up
    depth: Trend | None  # Works per second, after warm-up
    final_depth: int
    span_s: float  # seconds of post-warm-up data
    live_works: bool = False  # depth counts a traced program's live Works, not a work list
    anon: Trend | None = None  # anonymous memory, bytes per second after warm-up; None: too few readings
    growth: Growth | None = None  # the depth's rise after warm-up (issue 25: stepwise growth, analysis/growth.py)


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    basis: str = "rss"  # "work-list" (the causal signal), "rss", "anon" (RSS grew, file-backed), or "data"


MB = 1_000_000.0
MIN_SPAN_S = 2.0
MIN_POINTS = 8
# Depth is growing when its whole interval is above this many Works per second and the
# trend adds up to this many Works over the window: a bounded list only ever holds one
# round's sends (2), so a steady gain of 16 is no fluctuation.
DEPTH_GROWTH_FLOOR = 0.5
DEPTH_MIN_GAIN = 16


def per_hour_mb(bytes_per_s: float) -> float:
    return bytes_per_s * 3600.0 / MB


def decide(inputs: VerdictInputs, leak_threshold_mb_per_h: float) -> Decision:
    """LEAK / BOUNDED / INCONCLUSIVE for one rank, with the reason in words.

    Work-list growth is the causal signal: a list that keeps growing is a leak whatever
    RSS shows so far. Otherwise RSS decides when its 95% interval lies wholly above
    (LEAK) or below (BOUNDED) the threshold; an interval that straddles it cannot decide.
    """
    rss, depth = inputs.rss, inputs.depth
    if rss is None or depth is None or inputs.span_s < MIN_SPAN_S or rss.n < MIN_POINTS:
        return Decision(Verdict.INCONCLUSIVE, f"too little data after warm-up ({inputs.span_s:.1f} s)", "data")
    rss_text = f"RSS {per_hour_mb(rss.slope):+.0f} MB/h [95% {per_hour_mb(rss.lo):+.0f}, {per_hour_mb(rss.hi):+.0f}]"
    held = "live Works" if inputs.live_works else "work list"
    if depth.lo > DEPTH_GROWTH_FLOOR and depth.slope * inputs.span_s >= DEPTH_MIN_GAIN:
        grows = "live Works grow by" if inputs.live_works else "work list grows"
        return Decision(
            Verdict.LEAK,
            f"{grows} {depth.slope:.0f} Works/s (final {inputs.final_depth}); {rss_text}",
            "work-list",
        )
    # issue 25: a depth that only rises, in stairs under load, is a leak however wide its interval
    if inputs.growth is not None and inputs.growth.only_grows:
        return Decision(Verdict.LEAK, f"{inputs.growth.text(held)}; {rss_text}", "work-list")
    threshold = leak_threshold_mb_per_h
    if per_hour_mb(rss.lo) > threshold:
        return _rss_above(inputs, rss_text, threshold, held)
    if per_hour_mb(rss.floor) >= threshold:
        return Decision(
            Verdict.INCONCLUSIVE,
            f"{rss_text}, but this run could only have detected a leak above {per_hour_mb(rss.floor):.0f} MB/h "
            f"(threshold {threshold:.0f}): run longer",
        )
    if per_hour_mb(rss.hi) < threshold:
        return Decision(
            Verdict.BOUNDED, f"{rss_text} is below {threshold:.0f} MB/h; {held} bounded (final {inputs.final_depth})"
        )
    return Decision(Verdict.INCONCLUSIVE, f"{rss_text} straddles {threshold:.0f} MB/h; {held} not growing")


def _rss_above(inputs: VerdictInputs, rss_text: str, threshold: float, held: str) -> Decision:
    """RSS grows past the threshold: a leak when anonymous memory grows with it (or was not
    read). RSS also counts file-backed pages (mapped files, read in and kept by the kernel
    as long as memory allows), whose growth alone is no leak of the program's."""
    anon = inputs.anon
    if anon is None:
        return Decision(Verdict.LEAK, f"{rss_text} is above {threshold:.0f} MB/h; {held} not growing")
    anon_text = (
        f"anonymous memory {per_hour_mb(anon.slope):+.0f} MB/h "
        f"[95% {per_hour_mb(anon.lo):+.0f}, {per_hour_mb(anon.hi):+.0f}]"
    )
    if per_hour_mb(anon.lo) > threshold:
        return Decision(Verdict.LEAK, f"{rss_text} is above {threshold:.0f} MB/h, {anon_text} too; {held} not growing")
    if per_hour_mb(anon.hi) < threshold:
        return Decision(
            Verdict.BOUNDED,
            f"{rss_text} is above {threshold:.0f} MB/h but {anon_text} is below it: the growth is file-backed, "
            f"not a leak; {held} bounded (final {inputs.final_depth})",
            "anon",
        )
    return Decision(
        Verdict.INCONCLUSIVE, f"{rss_text} is above {threshold:.0f} MB/h; {anon_text} straddles it; {held} not growing"
    )
