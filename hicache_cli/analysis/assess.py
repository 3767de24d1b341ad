"""One rank's verdict from its samples: the trends after warm-up, and what they say.

Shared by the report (at the end), the dashboard (live, on fewer points) and early
stopping (is the verdict settled yet?), so that all three judge alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from hicache_cli.analysis import growth, stats, warmup
from hicache_cli.sample import Sample

RSS_QUANTUM = 4096  # RSS moves in pages
AUTO_WARMUP_MIN_S = 1.0


@dataclass(frozen=True)
class Assessment:
    verdict: stats.Decision
    rss: stats.Trend | None  # bytes per second
    depth: stats.Trend | None  # Works per second
    anon: stats.Trend | None  # anonymous memory, bytes per second; None: too few readings
    span_s: float  # seconds of post-warm-up data
    cut: int  # index of the first post-warm-up sample
    warmup_s: float  # where the trends start
    bytes_per_work: float | None  # RSS growth per Work of list growth, when the list grew


def resolve_warmup(series: list[Sample], warmup_s: float | None, threshold_mb_per_h: float) -> float:
    """A fixed warm-up, or (None) the end of the rank's start-up transient in RSS. A traced
    program's lasts until its RSS growth has settled, `warmup_s` at most (analysis/warmup.py)."""
    traced = bool(series) and series[-1].works is not None
    if warmup_s is not None and not traced:
        return warmup_s
    points = [(s.t, float(s.rss_bytes)) for s in series if s.rss_bytes is not None]
    if not points:
        return AUTO_WARMUP_MIN_S if warmup_s is None else warmup_s
    floor = threshold_mb_per_h * stats.MB / 3600.0 / 2.0  # bytes/s well under the threshold
    bound = max(AUTO_WARMUP_MIN_S, points[-1][0] / 2.0) if warmup_s is None else warmup_s
    if traced:  # issue 25: decided from the data, bounded by --warmup
        return warmup.settled_at(points, min(AUTO_WARMUP_MIN_S, bound), bound, floor)
    return stats.plateau_start(points, AUTO_WARMUP_MIN_S, bound, floor)


def assess_rank(
    series: list[Sample], warmup_s: float | None, threshold_mb_per_h: float, max_points: int = stats.MAX_POINTS
) -> Assessment:
    """`warmup_s` None: found per rank, where its RSS transient ends (stats.plateau_start)."""
    warmup = resolve_warmup(series, warmup_s, threshold_mb_per_h)
    cut = next((i for i, s in enumerate(series) if s.t >= warmup), len(series))
    after = series[cut:]
    rss_points = [(s.t, float(s.rss_bytes)) for s in after if s.rss_bytes is not None]
    rss = stats.theil_sen(stats.thin(rss_points, max_points), quantum=RSS_QUANTUM)
    depth = stats.theil_sen(stats.thin([(s.t, float(s.depth)) for s in after], max_points))
    # read about once a second (the probe's MEMORY_KINDS_HZ): a trend once there are enough
    anon_points = [(s.t, float(s.anon_bytes)) for s in after if s.anon_bytes is not None]
    anon = stats.theil_sen(anon_points, quantum=RSS_QUANTUM) if len(anon_points) >= stats.MIN_POINTS else None
    span = after[-1].t - after[0].t if after else 0.0
    inputs = stats.VerdictInputs(
        rss=rss,
        depth=depth,
        final_depth=series[-1].depth if series else 0,
        span_s=span,
        live_works=bool(series) and series[-1].works is not None,  # a traced process
        anon=anon,
        growth=growth.growth([(s.t, float(s.depth)) for s in after]),  # issue 25: stepwise growth
    )
    grew = bool(after) and after[-1].depth - after[0].depth >= 1000
    per_work = rss.slope / depth.slope if grew and rss and depth and depth.slope > 0 else None
    return Assessment(stats.decide(inputs, threshold_mb_per_h), rss, depth, anon, span, cut, warmup, per_work)
