"""Renderers for reading reports back: the summary of one, the comparison of two.

Pure: they turn report dicts into rich renderables; commands do the printing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from hicache_cli.present.dashboard import device_word
from hicache_cli.present.progress import summary_table, verdict_lines
from hicache_cli.units import format_bytes


def run_line(report: dict[str, Any]) -> str:
    """One line naming a run: policy, shape, duration, status, verdict."""
    cfg = report["config"]
    shape = f"{cfg['policy']} pp={cfg['pp']} tp={cfg['tp']} {cfg['duration_s']:g}s"
    return f"{shape}, {report['status']}, {report['verdict']}"


def report_summary(report: dict[str, Any], width: int = 160) -> RenderableType:
    cfg, env = report["config"], report["environment"]
    # what the ranks ran on (env.devices) and the PP-sync groups' backend, as the dashboard says it
    where = f"{device_word(env.get('device'), env.get('devices') or ())}/{env.get('pp_backend') or env.get('backend')}"
    head = [
        Text(f"hicache report (schema {report['schema_version']}): {run_line(report)}"),
        Text(
            f"workload {cfg['workload']}, seed {cfg['seed']}, "
            f"warm-up {'auto' if cfg.get('warmup_s') is None else format(cfg['warmup_s'], 'g') + 's'}, "
            f"threshold {cfg['leak_threshold_mb_per_h']:g} MB/h"
        ),
        Text(
            (f"hicache {env['hicache_version']}, " if env.get("hicache_version") else "")
            + f"torch {env.get('torch_version')}, {where}, host {env.get('host')}, "
            f"{env.get('cpu_count')} CPUs; wall {report.get('wall_s', 0):g}s"
        ),
    ]
    lines = [Text(line) for line in verdict_lines(report)]
    kinds = [Text(line) for line in memory_lines(report)]
    if kinds:
        lines += [Text(""), *kinds]
    return Group(*head, Text(""), summary_table(report, width), Text(""), *lines)


def memory_lines(report: dict[str, Any]) -> list[str]:
    """What each rank's RSS was made of at the end, and its anonymous memory's trend: the
    memory a kept Work grows (docs/verdicts.md). Ranks of older reports have none."""
    lines = []
    for r in report["ranks"]:
        kinds = r.get("memory_kinds")
        if not kinds:
            continue
        ci = kinds.get("anon_slope_ci95_mb_per_h")
        trend = "" if ci is None else f" ({kinds['anon_slope_mb_per_h']:+.0f} MB/h [95% {ci[0]:+.0f}, {ci[1]:+.0f}])"
        lines.append(
            f"rank {r['rank']} memory: anonymous {format_bytes(kinds.get('anon_end_bytes'))}{trend}, "
            f"USS {format_bytes(kinds.get('uss_end_bytes'))}, "
            f"file-backed {format_bytes(kinds.get('file_backed_end_bytes'))} "
            f"({kinds.get('readings', 0)} readings)"
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


def diff_ranks(a: dict[str, Any], b: dict[str, Any]) -> list[RankDiff]:
    """Pair ranks by number; a rank only one report has is paired with Nones."""
    by_a = {r["rank"]: r for r in a["ranks"]}
    by_b = {r["rank"]: r for r in b["ranks"]}

    def pick(r: dict[str, Any] | None, *path: str) -> Any:
        for key in path:
            if r is None:
                return None
            r = r.get(key)
        return r

    rows = []
    for rank in sorted(set(by_a) | set(by_b)):
        ra, rb = by_a.get(rank), by_b.get(rank)
        rows.append(
            RankDiff(
                rank=rank,
                verdict_a=pick(ra, "verdict") or "-",
                verdict_b=pick(rb, "verdict") or "-",
                slope_a=pick(ra, "rss", "slope_mb_per_h"),
                slope_b=pick(rb, "rss", "slope_mb_per_h"),
                depth_a=pick(ra, "work_list", "max"),
                depth_b=pick(rb, "work_list", "max"),
                p99_a=pick(ra, "loop_latency_ms", "p99"),
                p99_b=pick(rb, "loop_latency_ms", "p99"),
                rps_a=pick(ra, "rounds_per_s"),
                rps_b=pick(rb, "rounds_per_s"),
                rss_end_a=pick(ra, "rss", "end_bytes"),
                rss_end_b=pick(rb, "rss", "end_bytes"),
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


def report_diff(a: dict[str, Any], b: dict[str, Any], label_a: str, label_b: str) -> RenderableType:
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
