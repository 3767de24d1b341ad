"""Line charts as inline SVG: time on x, one line per rank (or policy, or release), the
warm-up and a verdict's trend drawn on them. No library and no script needed to see them:
each point carries a <title> (browsers show it on hover), the chart a <title> and <desc>
for screen readers, and its legend is HTML text. page.js adds a tooltip that reads the
points' titles. Stdlib only."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hicache_cli.present.html.markup import esc, tag

PALETTE = 8  # colour classes c0..c7 in page.css; further lines repeat them, dashed
WIDTH, HEIGHT = 600, 240
LEFT, RIGHT, TOP, BOTTOM = 62, 14, 12, 36
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
SAME_WARMUP_S = 0.05  # warm-ups closer than this are drawn as one


def value(raw: object) -> float | None:
    """A finite number from a report's list, or None (null, text, a boolean, NaN)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    return float(raw) if math.isfinite(raw) else None


@dataclass(frozen=True)
class Line:
    name: str  # the legend's words, e.g. "rank 0 (pp 0): LEAK"
    times: Sequence[object]  # seconds, as the report has them
    values: Sequence[object]  # in the chart's unit; None (or junk) leaves a gap
    colour: int
    trend: tuple[float, float] | None = None  # (value at t=0, slope per second) in the chart's unit
    trend_from: float = 0.0  # where the trend starts (the warm-up's end)
    trend_label: str | None = None  # e.g. "+4090 MB/h"
    warmup_s: float | None = None

    def points(self) -> list[tuple[float, float | None]]:
        pts = []
        for t, v in zip(self.times, self.values, strict=False):
            if (x := value(t)) is not None:
                pts.append((x, value(v)))
        return pts


@dataclass(frozen=True)
class Chart:
    id: str  # unique on the page, [a-z0-9-]
    title: str  # e.g. "RSS"
    unit: str  # e.g. "MiB": the y axis's label and each point's
    lines: list[Line]
    digits: int = 1  # decimals of a point's value
    from_zero: bool = False  # counts and latencies: the axis starts at 0
    min_span: Callable[[float], float] = field(default=lambda top: 0.0)  # the y range's least height, given its top
    note: str = ""  # under the legend: what the lines are (e.g. "the steepest rank of each policy")

    def drawable(self) -> bool:
        return any(v is not None for line in self.lines for _, v in line.points())


def nice_step(span: float, ticks: int = 4) -> float:
    """A step of 1, 2 or 5 x 10^k giving about `ticks` intervals over `span`."""
    raw = span / ticks if span > 0 else 1.0
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _axis(lo: float, hi: float) -> tuple[float, float, float]:
    step = nice_step(hi - lo)
    return math.floor(lo / step) * step, math.ceil(hi / step) * step, step


def _label(x: float, step: float) -> str:
    decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    return f"{x:,.{decimals}f}"


def y_range(chart: Chart) -> tuple[float, float, float]:
    values = [v for line in chart.lines for _, v in line.points() if v is not None]
    lo, hi = (0.0 if chart.from_zero else min(values)), max(values)
    span = max(hi - lo, chart.min_span(max(abs(hi), abs(lo))), 1e-9)
    if hi - lo < span:  # widen about the middle, never below 0 for what cannot be negative
        if not chart.from_zero:
            lo = (lo + hi - span) / 2
            if lo < 0 <= min(values):
                lo = 0.0
        hi = lo + span
    return _axis(lo, hi)


@dataclass(frozen=True)
class Frame:
    """A chart's axes: time from 0 to `x_hi`, values from `y_lo` to `y_hi`, and their ticks."""

    x_hi: float
    x_step: float
    y_lo: float
    y_hi: float
    y_step: float

    @classmethod
    def of(cls, chart: Chart) -> Frame:
        times = [t for line in chart.lines for t, _ in line.points()]
        x_hi = max([*times, 1.0])  # the axis ends where the run did, ticks at round seconds
        return cls(x_hi, nice_step(x_hi, 5), *y_range(chart))

    def sx(self, t: float) -> float:
        return LEFT + t / self.x_hi * PLOT_W

    def sy(self, v: float) -> float:
        return TOP + PLOT_H - (v - self.y_lo) / (self.y_hi - self.y_lo) * PLOT_H


def render(chart: Chart) -> str:
    """The chart as a <figure>: caption with legend (HTML), then the SVG."""
    frame = Frame.of(chart)
    clip = f"{chart.id}-clip"
    parts = [
        _grid(frame, chart.unit),
        _warmups(chart.lines, frame),
        tag("clipPath", tag("rect", x=LEFT, y=TOP, width=PLOT_W, height=PLOT_H), id=clip),
        *(_series(line, chart, frame, clip) for line in chart.lines),
        tag("line", class_="guide", x1=0, x2=0, y1=TOP, y2=TOP + PLOT_H, visibility="hidden"),
    ]
    svg = tag(
        "svg",
        tag("title", esc(chart.title), id=f"{chart.id}-title")
        + tag("desc", esc(_describe(chart)), id=f"{chart.id}-desc")
        + "".join(parts),
        viewBox=f"0 0 {WIDTH} {HEIGHT}",
        role="img",
        aria_labelledby=f"{chart.id}-title {chart.id}-desc",
        tabindex="0",
        class_="plot",
        xmlns="http://www.w3.org/2000/svg",
    )
    caption = tag("h3", esc(f"{chart.title} ({chart.unit})")) + _legend(chart)
    return tag("figure", tag("figcaption", caption) + svg, class_="chart", id=chart.id)


def _grid(frame: Frame, unit: str) -> str:
    out = []
    for i in range(round((frame.y_hi - frame.y_lo) / frame.y_step) + 1):
        v = frame.y_lo + i * frame.y_step
        y = f"{frame.sy(v):.1f}"
        out.append(tag("line", x1=LEFT, x2=LEFT + PLOT_W, y1=y, y2=y))
        out.append(tag("text", esc(_label(v, frame.y_step)), x=LEFT - 6, y=y, class_="yl"))
    for i in range(math.floor(frame.x_hi / frame.x_step + 1e-9) + 1):
        t = i * frame.x_step
        x = f"{frame.sx(t):.1f}"
        out.append(tag("line", x1=x, x2=x, y1=TOP, y2=TOP + PLOT_H, class_="v"))
        out.append(tag("text", esc(_label(t, frame.x_step)), x=x, y=TOP + PLOT_H + 14, class_="xl"))
    out.append(tag("text", "seconds since the workload started", x=LEFT + PLOT_W / 2, y=HEIGHT - 4, class_="xt"))
    middle = TOP + PLOT_H / 2
    out.append(tag("text", esc(unit), x=12, y=middle, class_="yt", transform=f"rotate(-90 12 {middle})"))
    return tag("g", "".join(out), class_="grid", aria_hidden="true")


def _warmups(lines: Sequence[Line], frame: Frame) -> str:
    """The warm-up: shaded up to the earliest rank's end, a marker where each ends (one,
    grey, when every line's ends together)."""
    ends = [(i, line.warmup_s) for i, line in enumerate(lines) if value(line.warmup_s) is not None]
    if not ends:
        return ""
    first = min(w for _, w in ends)
    together = max(w for _, w in ends) - first < SAME_WARMUP_S
    out = [tag("rect", x=LEFT, y=TOP, width=f"{max(0.0, frame.sx(first) - LEFT):.1f}", height=PLOT_H, class_="warm")]
    out.append(tag("text", "warm-up", x=LEFT + 4, y=TOP + 12, class_="wl"))
    marks = [(None, first)] if together else ends
    for i, w in marks:
        x = f"{frame.sx(w):.1f}"
        who = "every line" if i is None else lines[i].name
        colour = "" if i is None else f" {_colour(lines[i].colour)}"
        title = tag("title", esc(f"warm-up of {who} ends at {w:.1f} s: trends start here"))
        out.append(tag("line", title, x1=x, x2=x, y1=TOP, y2=TOP + PLOT_H, class_=f"wm{colour}"))
    return tag("g", "".join(out), class_="warmup")


def _series(line: Line, chart: Chart, frame: Frame, clip: str) -> str:
    points = line.points()
    path, dots, pen = [], [], "M"
    for t, v in points:
        if v is None:
            pen = "M"
            continue
        x, y = frame.sx(t), frame.sy(v)
        path.append(f"{pen}{x:.1f} {y:.1f}")
        pen = "L"
        label = f"{line.name}, {t:.1f} s: {v:,.{chart.digits}f} {chart.unit}"
        dots.append(tag("circle", tag("title", esc(label)), cx=f"{x:.1f}", cy=f"{y:.1f}", r="2.5"))
    parts = [tag("path", d="".join(path), class_="line")]
    if line.trend is not None and points and line.trend_from < points[-1][0]:
        at_zero, slope = line.trend
        t0, t1 = line.trend_from, points[-1][0]
        label = f"trend of {line.name} after the warm-up: {line.trend_label or ''}".rstrip(": ")
        parts.append(
            tag(
                "path",
                tag("title", esc(label)),
                d=f"M{frame.sx(t0):.1f} {frame.sy(at_zero + slope * t0):.1f}"
                f"L{frame.sx(t1):.1f} {frame.sy(at_zero + slope * t1):.1f}",
                class_="trend",
                clip_path=f"url(#{clip})",
            )
        )
    parts.append(tag("g", "".join(dots), class_="pts"))
    return tag("g", "".join(parts), class_=f"series {_colour(line.colour)}", data_name=line.name)


def _colour(index: int) -> str:
    """The colour class of line `index`; past the palette, its colours again, dashed."""
    return f"c{index % PALETTE}" + (" alt" if index >= PALETTE else "")


def _legend(chart: Chart) -> str:
    items = []
    for line in chart.lines:
        trend = f"; trend {line.trend_label}" if line.trend is not None and line.trend_label else ""
        key = tag("span", "", class_=f"key {_colour(line.colour)}", aria_hidden="true")
        items.append(tag("li", key + esc(line.name + trend)))
    note = tag("p", esc(chart.note), class_="note") if chart.note else ""
    return tag("ul", "".join(items), class_="legend") + note


def _describe(chart: Chart) -> str:
    """In words, for a screen reader: each line's first, last and highest value."""
    parts = []
    for line in chart.lines:
        values = [v for _, v in line.points() if v is not None]
        if not values:
            parts.append(f"{line.name}: no readings")
            continue
        d = chart.digits
        parts.append(
            f"{line.name}: {values[0]:,.{d}f} to {values[-1]:,.{d}f} {chart.unit}, highest {max(values):,.{d}f}"
        )
    return f"{chart.title} over time. " + "; ".join(parts) + "."
