"""One rank's verdict from its samples: the trends after warm-up, and what they say.

Shared by the report (at the end), the dashboard (live, on fewer points) and early
stopping (is the verdict settled yet?), so that all three judge alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from hicache_cli import stats
from hicache_cli.sample import Sample


@dataclass(frozen=True)
class Assessment:
    verdict: stats.Verdict
    rss: stats.Trend | None  # bytes per second
    depth: stats.Trend | None  # Works per second
    span_s: float  # seconds of post-warm-up data
    cut: int  # index of the first post-warm-up sample


def assess_rank(
    series: list[Sample], warmup_s: float, threshold_mb_per_h: float, max_points: int = stats.MAX_POINTS
) -> Assessment:
    cut = next((i for i, s in enumerate(series) if s.t >= warmup_s), len(series))
    after = series[cut:]
    rss_points = [(s.t, float(s.rss_bytes)) for s in after if s.rss_bytes is not None]
    rss = stats.theil_sen(stats.thin(rss_points, max_points))
    depth = stats.theil_sen(stats.thin([(s.t, float(s.depth)) for s in after], max_points))
    span = after[-1].t - after[0].t if after else 0.0
    inputs = stats.VerdictInputs(rss=rss, depth=depth, final_depth=series[-1].depth if series else 0, span_s=span)
    return Assessment(stats.decide(inputs, threshold_mb_per_h), rss, depth, span, cut)
