"""Charts GitHub draws itself in a step summary: Mermaid `xychart-beta` line charts of RSS
and live Works (work-list depth) per rank. An xychart spaces a line's values evenly over a
numeric x axis and has no legend, so each rank is resampled onto one time grid, the lines
are few (MAX_LINES) and coloured in COLOURS' order, which the summary's text names
(present/github.py). Nothing from a report but numbers goes into a chart."""

from __future__ import annotations

import bisect

from hicache_cli.analysis.results import RankReport, Report, Verdict
from hicache_cli.present.html.charts import Chart, Line, value, y_range
from hicache_cli.present.html.run_charts import chart, rank_line, rank_name

MAX_LINES = 4
POINTS = 24
# Mermaid's palette for the lines, in order, and the words the legend uses for them
COLOURS = (("#0072b2", "blue"), ("#d55e00", "orange"), ("#009e73", "green"), ("#cc79a7", "pink"))
INIT = (
    '%%{init: {"themeVariables": {"xyChart": {"plotColorPalette": "'
    + ", ".join(c for c, _ in COLOURS[:MAX_LINES])
    + '"}}}}%%'
)


def shown_ranks(report: Report) -> list[RankReport]:
    """At most MAX_LINES ranks with a series: leaking ones first, then the deepest work
    lists; drawn in rank order."""
    ranks = [r for r in report.ranks if r.series]
    ranked = sorted(
        ranks,
        key=lambda r: (r.verdict != Verdict.LEAK, -(value(r.work_list.max if r.work_list else None) or 0), r.rank),
    )
    return sorted(ranked[:MAX_LINES], key=lambda r: r.rank)


def on_grid(line: Line, grid: list[float]) -> list[float]:
    """The line's latest value at or before each grid time (its first before it began)."""
    known = [(t, v) for t, v in line.points() if v is not None]
    if not known:
        return [0.0 for _ in grid]
    times = [t for t, _ in known]
    return [known[max(0, bisect.bisect_right(times, g) - 1)][1] for g in grid]


def xychart(chart: Chart, end_s: float) -> str:
    end_s = round(end_s, 1)
    grid = [end_s * i / (POINTS - 1) for i in range(POINTS)]
    lo, hi, _ = y_range(chart)
    lines = [
        "```mermaid",
        INIT,
        "xychart-beta",
        f'    title "{chart.title} ({chart.unit})"',
        f'    x-axis "seconds" 0 --> {end_s:g}',
        f'    y-axis "{chart.unit}" {lo:g} --> {hi:g}',
    ]
    for line in chart.lines:
        lines.append("    line [" + ", ".join(f"{v:.{chart.digits}f}" for v in on_grid(line, grid)) + "]")
    return "\n".join([*lines, "```"])


def run_end_s(ranks: list[RankReport]) -> float:
    times = (value(x) for r in ranks if r.series is not None for x in r.series.t)
    return max((t for t in times if t is not None), default=0.0)


def rank_charts(report: Report, ranks: list[RankReport]) -> list[str]:
    """RSS and live Works (depth) of `ranks`, a line each in COLOURS' order, as xychart
    code blocks; none without a series to draw."""
    traced, end_s = report.traced, run_end_s(ranks)
    if end_s <= 0:
        return []
    blocks = []
    for measure in ("rss", "depth"):
        lines = [rank_line(r, i, measure, rank_name(r, traced), trend=False) for i, r in enumerate(ranks)]
        if (drawn := chart(f"summary-{measure}", measure, lines, traced)).drawable():
            blocks.append(xychart(drawn, end_s))
    return blocks
