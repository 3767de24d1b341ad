"""Charts GitHub draws itself in a step summary: Mermaid `xychart-beta` line charts of RSS
and live Works (work-list depth), a line per rank of a run (check) or per run of a
comparison (compare-policies). An xychart spaces a line's values evenly over a numeric x
axis and has no legend, so each line is resampled onto one time grid, the lines are few
(MAX_LINES ranks, at most len(COLOURS) runs) and coloured in COLOURS' order, which the
summary's text names (present/github.py). Nothing from a report but numbers goes into a
chart."""

from __future__ import annotations

import bisect
from collections.abc import Callable

from hicache_cli.analysis.results import RankReport, Report, Verdict
from hicache_cli.present.html.bundle import pick_rank
from hicache_cli.present.html.charts import Chart, Line, value, y_range
from hicache_cli.present.html.run_charts import chart, rank_line, rank_name

MAX_LINES = 4  # ranks of one run
POINTS = 24
# Mermaid's palette for the lines, in order, and the words the legend uses for them
# (Okabe and Ito's colours, told apart with colour-blind eyes too)
COLOURS = (
    ("#0072b2", "blue"),
    ("#d55e00", "orange"),
    ("#009e73", "green"),
    ("#cc79a7", "pink"),
    ("#56b4e9", "sky blue"),
    ("#e69f00", "gold"),
    ("#000000", "black"),
)


def init(lines: int) -> str:
    """The directive giving a chart of `lines` lines its palette (at least MAX_LINES colours)."""
    palette = ", ".join(c for c, _ in COLOURS[: max(lines, MAX_LINES)])
    return '%%{init: {"themeVariables": {"xyChart": {"plotColorPalette": "' + palette + '"}}}}%%'


INIT = init(MAX_LINES)


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
        init(len(chart.lines)),
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


def _blocks(lines_of: Callable[[str], list[Line]], end_s: float, traced: bool = False) -> list[str]:
    """RSS and live Works (depth) as xychart code blocks, the lines `lines_of(measure)` gives;
    none without a series to draw."""
    if end_s <= 0:
        return []
    blocks = []
    for measure in ("rss", "depth"):
        if (drawn := chart(f"summary-{measure}", measure, lines_of(measure), traced)).drawable():
            blocks.append(xychart(drawn, end_s))
    return blocks


def rank_charts(report: Report, ranks: list[RankReport]) -> list[str]:
    """RSS and live Works (depth) of `ranks`, a line each in COLOURS' order."""
    traced = report.traced

    def lines(measure: str) -> list[Line]:
        return [rank_line(r, i, measure, rank_name(r, traced), trend=False) for i, r in enumerate(ranks)]

    return _blocks(lines, run_end_s(ranks), traced)


def shown_runs(reports: list[Report]) -> list[Report]:
    """The runs of a comparison drawn, in its order: each with a series, at most len(COLOURS)."""
    return [r for r in reports if pick_rank(r, "rss") is not None][: len(COLOURS)]


def run_charts(runs: list[Report]) -> list[str]:
    """RSS and work-list depth of each run, a line each in COLOURS' order, from the rank its
    table's column reads (html/bundle.PICKS: the steepest RSS trend, the deepest work list)."""

    def picked(measure: str) -> list[tuple[int, RankReport]]:
        return [(i, rank) for i, report in enumerate(runs) if (rank := pick_rank(report, measure)) is not None]

    def lines(measure: str) -> list[Line]:
        return [rank_line(rank, i, measure, runs[i].config.label, trend=False) for i, rank in picked(measure)]

    return _blocks(lines, run_end_s([rank for _, rank in picked("rss")]))
