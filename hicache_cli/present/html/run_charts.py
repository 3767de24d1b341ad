"""A run's charts over time, from its typed report: one chart per measure, one line per
rank, each rank's warm-up and (where the verdict rests on one) its trend drawn on it. Also
the charts of a bundle: one measure of each policy's or release's run per chart."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hicache_cli.analysis import stats
from hicache_cli.analysis.results import RankReport, Report
from hicache_cli.present.html.charts import Chart, Line, value

MIB = 1024 * 1024
MB_PER_H = 1e6 / 3600.0  # bytes per second in one MB/h (the report's trend unit)


def rank_name(rank: RankReport, traced: bool) -> str:
    if traced:
        return f"rank {rank.rank}" + ("" if rank.pid is None else f" (pid {rank.pid})")
    where = f"pp {rank.pp_rank}" if rank.tp_rank == 0 else f"pp {rank.pp_rank}, tp {rank.tp_rank}"
    return f"rank {rank.rank} ({where})"


def depth_title(traced: bool) -> str:
    return "live Works" if traced else "work-list depth"


def _memory_span(top: float) -> float:
    """A flat line looks flat: memory axes span at least 16 MiB or a tenth of their top."""
    return max(16.0, 0.1 * top)


@dataclass(frozen=True)
class Measure:
    key: str  # in each rank's `series`
    title: str  # "" for depth: its title depends on the run (depth_title)
    unit: str
    divisor: float  # from the series' unit to the chart's
    digits: int  # decimals of a value shown
    from_zero: bool
    min_span: Callable[[float], float]  # the y axis's least height, given its top


MEASURES = {
    "rss": Measure("rss_bytes", "RSS", "MiB", MIB, 1, False, _memory_span),
    "anon": Measure("anon_bytes", "anonymous memory", "MiB", MIB, 1, False, _memory_span),
    "depth": Measure("depth", "", "Works", 1.0, 0, True, lambda top: 10.0),
    "p99": Measure("lat_p99_ms", "loop latency p99", "ms", 1.0, 2, True, lambda top: 1.0),
    "backlog": Measure("unreceived", "message backlog", "messages unreceived", 1.0, 0, True, lambda top: 10.0),
}


def _column(rank: RankReport, key: str, divisor: float) -> list[float | None]:
    raw = getattr(rank.series, key, None)
    column = raw if isinstance(raw, list) else []
    return [None if (v := value(x)) is None else v / divisor for x in column]


def _trend(
    rank: RankReport, times: Sequence[object], values: Sequence[float | None], per_s: float | None, warmup: float
) -> tuple[float, float] | None:
    """(value at t=0, slope per second) of the verdict's trend, anchored as Theil-Sen anchors
    it (stats.intercept) on the drawn points after the warm-up; None without a slope."""
    if per_s is None:
        return None
    after = [(t, v) for raw, v in zip(times, values, strict=False) if (t := value(raw)) is not None and t >= warmup]
    after = [(t, v) for t, v in after if v is not None]
    return (stats.intercept(after, per_s), per_s) if after else None


def _slope_per_s(rank: RankReport, measure: str) -> tuple[float | None, str | None]:
    """The report's trend of `measure`, per second in the chart's unit, and how it reads."""
    if measure == "rss" and rank.rss is not None and value(rank.rss.slope_mb_per_h) is not None:
        slope = rank.rss.slope_mb_per_h
        return slope * MB_PER_H / MIB, f"{slope:+.0f} MB/h"
    kinds = rank.memory_kinds
    if measure == "anon" and kinds is not None and value(kinds.anon_slope_mb_per_h) is not None:
        slope = kinds.anon_slope_mb_per_h
        return slope * MB_PER_H / MIB, f"{slope:+.0f} MB/h"
    if measure == "depth" and rank.work_list is not None and value(rank.work_list.growth_per_s) is not None:
        return rank.work_list.growth_per_s, f"{rank.work_list.growth_per_s:+.1f} Works/s"
    return None, None


def rank_line(rank: RankReport, index: int, measure: str, name: str, trend: bool = True) -> Line:
    times = rank.series.t if rank.series is not None else None
    times = times if isinstance(times, list) else []
    values = _column(rank, MEASURES[measure].key, MEASURES[measure].divisor)
    warmup = value(rank.warmup_s)
    per_s, label = _slope_per_s(rank, measure) if trend else (None, None)
    return Line(
        name=name,
        times=times,
        values=values,
        colour=index,
        trend=_trend(rank, times, values, per_s, warmup or 0.0),
        trend_from=warmup or 0.0,
        trend_label=label,
        warmup_s=warmup if trend else None,
    )


def chart(chart_id: str, measure: str, lines: list[Line], traced: bool = False, note: str = "") -> Chart:
    m = MEASURES[measure]
    return Chart(chart_id, m.title or depth_title(traced), m.unit, lines, m.digits, m.from_zero, m.min_span, note)


def run_charts(report: Report) -> list[Chart]:
    """RSS, anonymous memory, depth (live Works), loop p99 and the backlog, each drawn when
    some rank has readings of it; a line per rank that has a series."""
    traced = report.traced
    ranks = [r for r in report.ranks if r.series]
    charts = []
    for measure in MEASURES:
        lines = [
            rank_line(r, i, measure, f"{rank_name(r, traced)}: {r.verdict}")
            for i, r in enumerate(ranks)
            if measure != "backlog" or (r.series is not None and r.series.unreceived is not None)
        ]
        if (c := chart(f"chart-{measure}", measure, lines, traced)).drawable():
            charts.append(c)
    return charts
