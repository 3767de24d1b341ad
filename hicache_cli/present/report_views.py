"""Renderers for reading reports back: the summary of one, the comparison of two.

Pure: they turn reports into rich renderables; commands do the printing.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from hicache_cli.analysis.results import RankReport, Report
from hicache_cli.present.dashboard import device_word
from hicache_cli.present.progress import summary_table, verdict_lines
from hicache_cli.units import format_bytes


def run_line(report: Report) -> str:
    """One line naming a run: policy, shape, duration, status, verdict."""
    return f"{report.config.title(' ')}, {report.status}, {report.verdict}"


def report_summary(report: Report, width: int = 160) -> RenderableType:
    cfg, env, ranked = report.config, report.environment, report.config.ranked
    # what the ranks ran on (env.devices) and the PP-sync groups' backend, as the dashboard says it
    where = f"{device_word(env.device, env.devices or ())}/{env.pp_backend or env.backend}"
    warmup = "auto" if cfg.warmup_s is None else f"{cfg.warmup_s:g}s"
    head = [
        Text(f"hicache report (schema {report.schema_version}): {run_line(report)}"),
        Text(
            (f"workload {ranked.workload}, seed {ranked.seed}, " if ranked else "")
            + f"warm-up {warmup}, threshold {cfg.leak_threshold_mb_per_h:g} MB/h"
        ),
        Text(
            (f"hicache {env.hicache_version}, " if env.hicache_version else "")
            + f"torch {env.torch_version}, {where}, host {env.host}, "
            f"{env.cpu_count} CPUs; wall {report.wall_s or 0:g}s"
        ),
    ]
    lines = [Text(line) for line in verdict_lines(report)]
    kinds = [Text(line) for line in memory_lines(report)]
    if kinds:
        lines += [Text(""), *kinds]
    return Group(*head, Text(""), summary_table(report, width), Text(""), *lines)


def memory_lines(report: Report) -> list[str]:
    """What each rank's RSS was made of at the end, and its anonymous memory's trend: the
    memory a kept Work grows (docs/verdicts.md). Ranks of older reports have none."""
    lines = []
    for r in report.ranks:
        kinds = r.memory_kinds
        if not kinds:
            continue
        ci, slope = kinds.anon_slope_ci95_mb_per_h, kinds.anon_slope_mb_per_h
        trend = "" if ci is None or slope is None else f" ({slope:+.0f} MB/h [95% {ci[0]:+.0f}, {ci[1]:+.0f}])"
        lines.append(
            f"rank {r.rank} memory: anonymous {format_bytes(kinds.anon_end_bytes)}{trend}, "
            f"USS {format_bytes(kinds.uss_end_bytes)}, "
            f"file-backed {format_bytes(kinds.file_backed_end_bytes)} "
            f"({kinds.readings} readings)"
        )
    return lines


@dataclass(frozen=True)
class RankDiff:
    rank: int
    verdict_a: str
    verdict_b: str
    slope_a: float | None
    slope_b: float | None
    depth_a: int | None
    depth_b: int | None
    p99_a: float | None
    p99_b: float | None
    rps_a: float | None
    rps_b: float | None
    rss_end_a: int | None
    rss_end_b: int | None


@dataclass(frozen=True)
class _Figures:
    """The figures a diff shows of one rank; all None for a rank the report lacks."""

    verdict: str = "-"
    slope: float | None = None
    depth: int | None = None
    p99: float | None = None
    rps: float | None = None
    rss_end: int | None = None

    @classmethod
    def of(cls, r: RankReport | None) -> _Figures:
        if r is None:
            return cls()
        return cls(
            verdict=r.verdict or "-",
            slope=r.rss.slope_mb_per_h if r.rss else None,
            depth=r.work_list.max if r.work_list else None,
            p99=r.loop_latency.p99 if r.loop_latency else None,
            rps=r.rounds_per_s,
            rss_end=r.rss.end_bytes if r.rss else None,
        )


def diff_ranks(a: Report, b: Report) -> list[RankDiff]:
    """Pair ranks by number; a rank only one report has is paired with Nones."""
    by_a = {r.rank: r for r in a.ranks}
    by_b = {r.rank: r for r in b.ranks}
    rows = []
    for rank in sorted(set(by_a) | set(by_b)):
        fa, fb = _Figures.of(by_a.get(rank)), _Figures.of(by_b.get(rank))
        rows.append(
            RankDiff(
                rank=rank,
                verdict_a=fa.verdict,
                verdict_b=fb.verdict,
                slope_a=fa.slope,
                slope_b=fb.slope,
                depth_a=fa.depth,
                depth_b=fb.depth,
                p99_a=fa.p99,
                p99_b=fb.p99,
                rps_a=fa.rps,
                rps_b=fb.rps,
                rss_end_a=fa.rss_end,
                rss_end_b=fb.rss_end,
            )
        )
    return rows


def _pair(a: float | None, b: float | None, spec: str, change: str) -> str:
    """'a -> b (change)'; change is 'delta' (b - a) or 'ratio' (b / a)."""
    if a is None or b is None:
        return f"{'-' if a is None else format(a, spec)} -> {'-' if b is None else format(b, spec)}"
    if change == "ratio":
        extra = f"x{b / a:.2f}" if a else "n/a"
    else:
        extra = format(b - a, "+" + spec.lstrip("+"))
    return f"{format(a, spec)} -> {format(b, spec)} ({extra})"


def report_diff(a: Report, b: Report, label_a: str, label_b: str) -> RenderableType:
    head = Text(f"A: {label_a}: {run_line(a)}\nB: {label_b}: {run_line(b)}")
    table = Table(box=None, padding=(0, 1), pad_edge=False)
    for name in ("rank", "verdict A -> B", "RSS slope MB/h", "RSS end", "depth max", "p99 ms", "rounds/s"):
        table.add_column(name, justify="left" if name.startswith("verdict") else "right")
    for d in diff_ranks(a, b):
        changed = d.verdict_a != d.verdict_b
        table.add_row(
            str(d.rank),
            Text(f"{d.verdict_a} -> {d.verdict_b}", "bold" if changed else ""),
            _pair(d.slope_a, d.slope_b, "+.0f", "delta"),
            f"{format_bytes(d.rss_end_a)} -> {format_bytes(d.rss_end_b)}",
            _pair(d.depth_a, d.depth_b, "d", "delta"),
            _pair(d.p99_a, d.p99_b, ".2f", "ratio"),
            _pair(d.rps_a, d.rps_b, ".0f", "ratio"),
        )
    return Group(head, Text(""), table)
