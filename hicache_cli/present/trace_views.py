"""How a traced program's report reads: one row per observed process (its Works, its
memory, its verdict), and the lines that name the sites leaking Works."""

from __future__ import annotations

from rich.table import Table

from hicache_cli.analysis.results import Report, TraceSection
from hicache_cli.analysis.trace_report import NOTHING_TRACED, nothing_traced, site_text
from hicache_cli.units import format_bytes

SITES_SHOWN = 3  # per process, in the lines under the table


def traced_command(report: Report) -> list[str]:
    target = report.target
    return list(target.command or []) if isinstance(target, TraceSection) else []


def command_text(report: Report) -> str:
    return " ".join(traced_command(report)) or "?"


def trace_table(report: Report, width: int = 160) -> Table:
    exit_code = report.program_exit_code
    ended = f"stopped by hicache: {report.program_stopped}" if report.program_stopped else "ended by itself"
    title = (
        f"trace: {command_text(report)}  status={report.status}  verdict={report.verdict}"
        f"  exit={'n/a' if exit_code is None else exit_code} ({ended})"
    )
    wide = width >= 110
    table = Table(title=title, title_justify="left", box=None, padding=(0, 1), pad_edge=False)
    names = ["rank", "pid", "verdict", "RSS end", "slope MB/h [95%]", "live max/final", "created", "waited"]
    names += ["dropped", "top site"] if wide else []
    for name in names:
        table.add_column(name, justify="left" if name in ("verdict", "top site") else "right")
    for r in report.measured_ranks:
        rss, works = r.rss, r.works
        rank = str(r.rank) if r.file_number == r.rank else f"{r.rank} (#{r.slot})"
        cells = [rank, "" if r.pid is None else str(r.pid), r.verdict, format_bytes(rss.end_bytes if rss else None)]
        cells.append((rss.trend_text() if rss else None) or "n/a")
        cells.append(f"{works.live_max if works else 0}/{works.live_final if works else 0}")
        cells += [str(works.created if works else 0), str(works.waited if works else 0)]
        if wide:
            sites = works.sites if works else []
            cells += [str(works.dropped if works else 0), site_text(sites[0]) if sites else "-"]
        table.add_row(*cells)
    return table


def trace_lines(report: Report) -> list[str]:
    """Per process: its verdict, then the sites still holding live Works."""
    lines = []
    for r in report.measured_ranks:
        lines.append(f"rank {r.rank} (pid {r.pid}): {r.verdict} - {r.verdict_reason}")
        for site in (r.works.sites if r.works else [])[:SITES_SHOWN]:
            if site.live > 0:
                lines.append(f"    {site.live:>8} live  {site.created:>8} created  {site_text(site)}  ({site.file})")
    if not report.measured_ranks:
        why = nothing_traced(traced_command(report))
        lines.append(why if why != NOTHING_TRACED else f"{why}: nothing to trace")
    lines += [f"failure: {f.line()}" for f in report.failures]
    return lines
