"""How a traced program's report reads: one row per observed process (its Works, its
memory, its verdict), and the lines that name the sites leaking Works."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from hicache_cli.analysis.trace_report import site_text
from hicache_cli.units import format_bytes

SITES_SHOWN = 3  # per process, in the lines under the table


def command_text(report: dict[str, Any]) -> str:
    target = report.get("target") or {}
    return " ".join(target.get("command") or ["?"])


def trace_table(report: dict[str, Any], width: int = 160) -> Table:
    exit_code = report.get("program_exit_code")
    ended = f"stopped by hicache: {report['program_stopped']}" if report.get("program_stopped") else "ended by itself"
    title = (
        f"trace: {command_text(report)}  status={report['status']}  verdict={report['verdict']}"
        f"  exit={'n/a' if exit_code is None else exit_code} ({ended})"
    )
    wide = width >= 110
    table = Table(title=title, title_justify="left", box=None, padding=(0, 1), pad_edge=False)
    names = ["rank", "pid", "verdict", "RSS end", "slope MB/h [95%]", "live max/final", "created", "waited"]
    names += ["dropped", "top site"] if wide else []
    for name in names:
        table.add_column(name, justify="left" if name in ("verdict", "top site") else "right")
    for r in report["ranks"]:
        if not r.get("samples"):
            continue
        works, rss = r.get("works") or {}, r["rss"]
        ci = rss["slope_ci95_mb_per_h"]
        rank = str(r["rank"]) if r.get("slot", r["rank"]) == r["rank"] else f"{r['rank']} (#{r['slot']})"
        cells = [rank, str(r.get("pid", "")), r["verdict"], format_bytes(rss["end_bytes"])]
        cells.append("n/a" if ci is None else f"{rss['slope_mb_per_h']:+.0f} [{ci[0]:+.0f},{ci[1]:+.0f}]")
        cells.append(f"{works.get('live_max', 0)}/{works.get('live_final', 0)}")
        cells += [str(works.get("created", 0)), str(works.get("waited", 0))]
        if wide:
            sites = works.get("sites") or []
            cells += [str(works.get("dropped", 0)), site_text(sites[0]) if sites else "-"]
        table.add_row(*cells)
    return table


def trace_lines(report: dict[str, Any]) -> list[str]:
    """Per process: its verdict, then the sites still holding live Works."""
    lines = []
    for r in report["ranks"]:
        if not r.get("samples"):
            continue
        lines.append(f"rank {r['rank']} (pid {r.get('pid')}): {r['verdict']} - {r['verdict_reason']}")
        for site in ((r.get("works") or {}).get("sites") or [])[:SITES_SHOWN]:
            if site.get("live", 0) > 0:
                lines.append(
                    f"    {site['live']:>8} live  {site['created']:>8} created  {site_text(site)}  ({site['file']})"
                )
        lines += [f"    shutdown hazard: {line}" for line in (r.get("shutdown") or {}).get("lines", [])]
    if not any(r.get("samples") for r in report["ranks"]):
        lines.append("no process of the program started a torch.distributed process group: nothing to trace")
    lines += [f"failure: rank {f['rank']} {f['kind']}: {f['message']}" for f in report["failures"]]
    return lines
