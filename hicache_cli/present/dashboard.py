"""The live dashboard: a model built from the run directory's samples, and its rendering.

`Dashboard.model()` aggregates (pure apart from a small cache of trends); `render()` only
turns a model into rich renderables. The run directory is the only input, so the same
dashboard follows a run it launched (`stress`) or one started elsewhere (`watch`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from hicache_cli.analysis import stats
from hicache_cli.analysis.causes import judge
from hicache_cli.analysis.figures import rounds_per_s
from hicache_cli.analysis.kinds import Verdict
from hicache_cli.config import RunConfig
from hicache_cli.sample import Sample
from hicache_cli.units import format_bytes, format_bytes_short, format_duration

SPARK = "▁▂▃▄▅▆▇█"
LIVE_TREND_POINTS = 60  # thinner than the report's trends: recomputed every second
STALL_AGE_S = 2.0  # a round older than this shows as stalled
SPARK_POINTS = 48  # samples a sparkline is drawn from (then thinned to its width)


def sparkline(values: list[float], width: int) -> str:
    """The last `width` buckets of `values` as block characters, scaled to their range."""
    if not values:
        return ""
    picked = stats.thin(values, width) if len(values) > width else values
    lo, hi = min(picked), max(picked)
    if hi == lo:
        return SPARK[0] * len(picked)
    scale = (len(SPARK) - 1) / (hi - lo)
    return "".join(SPARK[round((v - lo) * scale)] for v in picked)


@dataclass(frozen=True)
class RankRow:
    rank: int
    pp_rank: int
    tp_rank: int
    state: str  # starting | running | stalled | stopping | done | crashed | interrupted
    rss_bytes: int | None
    rss_change_bytes: int | None  # since the end of warm-up
    trend_mb_per_h: float | None
    rss_spark: list[float]
    depth: int
    depth_spark: list[float]
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    rounds_per_s: float | None
    round_age_s: float | None
    blocked_on: str | None
    verdict: Verdict | None
    backlog: int | None = None  # the largest backlog of the messages this rank sent (analysis/messages.py)
    backlog_grows: bool = False


@dataclass(frozen=True)
class DashboardModel:
    config: RunConfig
    run_dir: str
    run_t: float  # seconds of workload so far (the furthest rank)
    launch_elapsed: float  # seconds since launch, start-up included
    rows: list[RankRow]
    verdict: Verdict  # so far
    # across nodes: node -> (its host, the ranks it runs), from the samples; one entry on one machine
    nodes: dict[int, tuple[str | None, list[int]]] = field(default_factory=dict)
    devices: tuple[str, ...] = ()  # what the ranks say they run on ("cpu" or a GPU model), once they sample

    @property
    def started(self) -> bool:
        return any(r.state != "starting" for r in self.rows)

    @property
    def finished(self) -> bool:
        return bool(self.rows) and all(r.state in ("done", "crashed", "interrupted") for r in self.rows)


def rank_state(last: Sample | None) -> str:
    if last is None:
        return "starting"
    if last.kind == "final":
        return {"error": "crashed", "interrupted": "interrupted"}.get(last.state, "done")
    if last.round_age_s >= STALL_AGE_S:
        return "stalled"
    return last.state


class Dashboard:
    """Builds models from samples; keeps per-rank trends for a second between updates."""

    def __init__(self, config: RunConfig, run_dir: str) -> None:
        self.config = config
        self.run_dir = run_dir
        self._tp = config.ranked.tp if config.ranked else 1
        # rank -> (t, MB/h, verdict, warm-up, backlog, growing), recomputed at most once a second of run time
        self._trends: dict[int, tuple[float, float | None, Verdict | None, float, int | None, bool]] = {}

    def model(self, samples: dict[int, list[Sample]], launch_elapsed: float) -> DashboardModel:
        # every rank of the run, and (hicache trace, where processes are found as they start) every file
        ranks = sorted(set(range(self.config.expected_ranks or 0)) | set(samples))
        rows = [self._row(rank, samples) for rank in ranks]
        run_t = max((s[-1].t for s in samples.values() if s), default=0.0)
        verdict = Verdict.overall(r.verdict for r in rows)  # as in the report
        nodes: dict[int, tuple[str | None, list[int]]] = {}
        for rank, series in sorted(samples.items()):
            if series:
                nodes.setdefault(series[-1].node, (series[-1].host, []))[1].append(rank)
        devices = tuple(sorted({s[-1].device_name for s in samples.values() if s and s[-1].device_name}))
        return DashboardModel(self.config, self.run_dir, run_t, launch_elapsed, rows, verdict, nodes, devices)

    def _row(self, rank: int, samples: dict[int, list[Sample]]) -> RankRow:
        pp_rank, tp_rank = divmod(rank, self._tp)
        series = samples.get(rank, [])
        if not series:
            return RankRow(rank, pp_rank, tp_rank, "starting", None, None, None, [], 0, [], *[None] * 6, None)
        last = series[-1]
        trend, verdict, warmup, backlog, grows = self._trend(rank, samples)
        base = next((s.rss_bytes for s in series if s.t >= warmup and s.rss_bytes is not None), None)
        return RankRow(
            rank=rank,
            pp_rank=pp_rank,
            tp_rank=tp_rank,
            state=rank_state(last),
            rss_bytes=last.rss_bytes,
            rss_change_bytes=None if base is None or last.rss_bytes is None else last.rss_bytes - base,
            trend_mb_per_h=trend,
            rss_spark=[float(s.rss_bytes) for s in stats.thin(series, SPARK_POINTS) if s.rss_bytes is not None],
            depth=last.depth,
            depth_spark=[float(s.depth) for s in stats.thin(series, SPARK_POINTS)],
            p50_ms=last.lat_p50_ms,
            p99_ms=last.lat_p99_ms,
            max_ms=last.lat_max_ms,
            rounds_per_s=rounds_per_s(last),
            round_age_s=last.round_age_s,
            blocked_on=last.blocked_on,
            verdict=verdict,
            backlog=backlog,
            backlog_grows=grows,
        )

    def _trend(
        self, rank: int, samples: dict[int, list[Sample]]
    ) -> tuple[float | None, Verdict | None, float, int | None, bool]:
        """(MB/h, verdict, warm-up, largest backlog of its sends, whether one grows)."""
        series = samples[rank]
        last_t = series[-1].t
        cached = self._trends.get(rank)
        if cached is not None and last_t - cached[0] < 1.0 and series[-1].kind != "final":
            return cached[1:]
        config = self.config
        judged = judge(samples, rank, config.warmup_s, config.leak_threshold_mb_per_h, LIVE_TREND_POINTS, self._tp)
        assessment = judged.assessment
        trend = stats.per_hour_mb(assessment.rss.slope) if assessment.rss else None
        verdict = assessment.verdict.verdict if assessment.cut < len(series) else None
        backlogs = [f.backlog for f in judged.flows if f.backlog is not None]
        grows = any(f.backlog_grows for f in judged.flows)
        self._trends[rank] = (last_t, trend, verdict, assessment.warmup_s, max(backlogs, default=None), grows)
        return self._trends[rank][1:]


# -- rendering --------------------------------------------------------------------

STATE_STYLE = {
    "starting": "dim",
    "running": "green",
    "stopping": "cyan",
    "done": "bold green",
    "stalled": "bold yellow",
    "crashed": "bold red",
    "interrupted": "yellow",
}
VERDICT_STYLE = {Verdict.LEAK: "bold red", Verdict.BOUNDED: "bold green", Verdict.INCONCLUSIVE: "yellow"}


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def device_word(asked: str | None, used: tuple[str, ...] | list[str] = ()) -> str:
    """`cpu` or `cuda`: what the ranks run on, as they report it (a GPU by its model name),
    else what was asked (`auto` until the first sample)."""
    if asked in ("cpu", "cuda") or not used:
        return str(asked)
    return "cpu" if all(name == "cpu" for name in used) else "cuda"


def render(model: DashboardModel, width: int = 100) -> RenderableType:
    return Group(_header(model, width), rank_table(model, width))


def _header(model: DashboardModel, width: int) -> RenderableType:
    cfg, ranked = model.config, model.config.ranked
    line = Text()
    if ranked is None:
        line.append("hicache ", style="bold")
        line.append(f"{cfg.title()}  verdict so far: ")
    elif width >= 70:
        line.append("hicache ", style="bold")
        where = f"{device_word(ranked.device, model.devices)}/{ranked.pp_backend}"
        line.append(f"{cfg.label}  pp={ranked.pp} x tp={ranked.tp}  {where}  verdict so far: ")
    else:
        line.append(f"{cfg.label} pp{ranked.pp}xtp{ranked.tp} ")
    line.append(model.verdict, style=VERDICT_STYLE.get(model.verdict, ""))
    if cfg.duration_s is None:  # a trace without --duration: it lasts as long as the program
        timing = f"{format_duration(model.launch_elapsed)} since launch, until the program ends"
        lines = [line, Text(timing), Text(f"run dir: {model.run_dir}", style="dim", overflow="ellipsis", no_wrap=True)]
        return Group(*lines)
    done = min(model.run_t, cfg.duration_s)
    if model.started:
        timing = f"{format_duration(done)}/{format_duration(cfg.duration_s)}"
        if width >= 60:
            timing += f"  remaining {format_duration(max(0.0, cfg.duration_s - done))}"
    else:
        timing = f"starting ({format_duration(model.launch_elapsed)})"
    bar = ProgressBar(total=cfg.duration_s, completed=done, width=max(8, min(40, width - len(timing) - 2)))
    row = Table.grid(padding=(0, 1))
    row.add_row(bar, Text(timing))
    lines = [line, row, Text(f"run dir: {model.run_dir}", style="dim", overflow="ellipsis", no_wrap=True)]
    if len(model.nodes) > 1:  # across nodes: which ranks each node runs
        where = "  ".join(
            f"node {k} ({host or '?'}): ranks {','.join(map(str, ranks))}"
            for k, (host, ranks) in sorted(model.nodes.items())
        )
        lines.append(Text(where, style="dim", overflow="ellipsis", no_wrap=True))
    return Group(*lines)


@dataclass(frozen=True)
class Column:
    header: str
    width: int
    cell: Callable[[RankRow], str]
    style: Callable[[RankRow], str] = lambda _row: ""
    left: bool = False


def _trend_style(threshold: float) -> Callable[[RankRow], str]:
    return lambda r: "red" if r.trend_mb_per_h is not None and r.trend_mb_per_h > threshold else ""


def _depth_style(r: RankRow) -> str:
    return "red" if r.depth > 1000 else ("yellow" if r.depth > 64 else "")


def _backlog_style(r: RankRow) -> str:
    return "red" if r.backlog_grows else ""


def _age_style(r: RankRow) -> str:
    age = r.round_age_s or 0.0
    return "red" if age >= STALL_AGE_S else ("yellow" if age >= 0.5 else "")


def _rss_change(r: RankRow) -> str:
    return "-" if r.rss_change_bytes is None else format_bytes(r.rss_change_bytes)


def _latencies(r: RankRow) -> str:
    return f"{_num(r.p50_ms, '.2f')}/{_num(r.p99_ms, '.2f')}/{_num(r.max_ms, '.1f')}"


LAYOUTS = ("wide", "medium", "narrow")


def _columns(width: int, threshold: float) -> list[Column]:
    """The richest layout that fits: everything (118 columns), the essentials with short
    sparklines (80), or only the numbers that tell a leak (59); narrower still, cut."""
    for layout in LAYOUTS:
        cols = _layout(layout, threshold)
        if sum(c.width for c in cols) + len(cols) - 1 <= width:
            return cols
    return cols


def _layout(layout: str, threshold: float) -> list[Column]:
    wide, medium = layout == "wide", layout in ("wide", "medium")
    spark_w = 8 if wide else 6
    size = format_bytes if wide else format_bytes_short
    cols = [
        Column("rank", 4, lambda r: str(r.rank)),
        Column("pp/tp", 5, lambda r: f"{r.pp_rank}/{r.tp_rank}"),
        Column("state", 11, lambda r: r.state, lambda r: STATE_STYLE.get(r.state, ""), left=True),
        Column("RSS", 10 if wide else 6, lambda r: "-" if r.rss_bytes is None else size(r.rss_bytes)),
    ]
    if wide:
        cols.append(Column("Δwarm", 10, _rss_change))
    cols.append(Column("MB/h", 7, lambda r: _num(r.trend_mb_per_h, "+.0f"), _trend_style(threshold)))
    if medium:
        cols.append(Column("", spark_w, lambda r: sparkline(r.rss_spark, spark_w), lambda _r: "cyan", left=True))
    cols.append(Column("depth", 7, lambda r: str(r.depth), _depth_style))
    if medium:
        cols.append(Column("", spark_w, lambda r: sparkline(r.depth_spark, spark_w), lambda _r: "magenta", left=True))
    if wide:  # messages this rank sent that their receiver has not asked for yet
        cols.append(Column("backlog", 7, lambda r: "-" if r.backlog is None else str(r.backlog), _backlog_style))
        cols.append(Column("p50/p99/max ms", 17, _latencies))
    else:
        cols.append(Column("p99ms", 6, lambda r: _num(r.p99_ms, ".1f")))
    cols.append(Column("rnd/s", 6, lambda r: _num(r.rounds_per_s, ".0f")))
    if medium:
        cols.append(Column("age", 6, lambda r: "-" if r.round_age_s is None else f"{r.round_age_s:.1f}s", _age_style))
    return cols


def rank_table(model: DashboardModel, width: int = 100) -> Text:
    """One line per rank under a header, laid out by hand: a rich Table costs ~3.5x more
    per frame, and the dashboard shares the CPUs with the ranks it measures."""
    cols = _columns(width, model.config.leak_threshold_mb_per_h)
    if model.config.ranked is None:  # what the depth column counts there: live Works, never waited
        cols = [replace(c, header="live") if c.header == "depth" else c for c in cols]
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append(" ".join(_fit(c.header, c.width, c.left) for c in cols).rstrip() + "\n", style="bold")
    for r in model.rows:
        for i, c in enumerate(cols):
            out.append((" " if i else "") + _fit(c.cell(r), c.width, c.left), style=c.style(r))
        out.append("\n")
    out.rstrip()
    return out


def _fit(text: str, width: int, left: bool) -> str:
    if len(text) > width:
        return text[: width - 1] + "…"
    return text.ljust(width) if left else text.rjust(width)
