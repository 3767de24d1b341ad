"""How a traced program's report reads: one row per observed process (its Works, its
memory, its verdict), and the lines that name the sites leaking Works; for processes
attached to (`hicache attach`), how each was attached and what its census found, by holder."""

from __future__ import annotations

from rich.table import Table

from hicache_cli.analysis.results import AttachSection, FollowSection, Report, TraceSection
from hicache_cli.analysis.trace_report import NOTHING_TRACED, nothing_traced, poll_text, site_text
from hicache_cli.attached import AttachedPid, HolderCount
from hicache_cli.units import format_bytes

SITES_SHOWN = 3  # per process, in the lines under the table
HOLDERS_SHOWN = 5  # per process, the census's largest holders


def traced_command(report: Report) -> list[str]:
    return report.target.command() if report.target is not None else []


def command_text(report: Report) -> str:
    return " ".join(traced_command(report)) or "?"


def _program_title(report: Report) -> str:
    exit_code = report.program_exit_code
    ended = f"stopped by hicache: {report.program_stopped}" if report.program_stopped else "ended by itself"
    return (
        f"trace: {command_text(report)}  status={report.status}  verdict={report.verdict}"
        f"  exit={'n/a' if exit_code is None else exit_code} ({ended})"
    )


def _attached_title(report: Report) -> str:
    assert isinstance(report.target, AttachSection)
    ended = f"detached: {report.program_stopped}" if report.program_stopped else _endings(report.target)
    return f"{report.config.title()}  status={report.status}  verdict={report.verdict}  ({ended})"


def _attached_lines(report: Report) -> list[str]:
    assert isinstance(report.target, AttachSection)
    return [line for process in report.target.processes for line in attached_lines(process, end=True)]


# What each kind of traced target adds to the views, by its section's kind (the one place a kind picks them)
TITLES = {TraceSection.kind: _program_title, AttachSection.kind: _attached_title, FollowSection.kind: _attached_title}
MORE_LINES = {AttachSection.kind: _attached_lines, FollowSection.kind: _attached_lines}


def trace_table(report: Report, width: int = 160) -> Table:
    kind = report.target.kind if report.target is not None else TraceSection.kind
    title = TITLES.get(kind, _program_title)(report)
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
                if (polled := poll_text(site)) is not None:
                    lines.append(f"    {'':>8}       {'':>8}          {polled}")
        lines += [f"    shutdown hazard: {line}" for line in (r.shutdown.lines if r.shutdown else [])]
    if report.target is not None and (more := MORE_LINES.get(report.target.kind)) is not None:
        lines += more(report)
    elif not report.measured_ranks:
        why = nothing_traced(traced_command(report))
        lines.append(why if why != NOTHING_TRACED else f"{why}: nothing to trace")
    lines += [f"failure: {f.line()}" for f in report.failures]
    return lines


def attached_lines(process: AttachedPid, end: bool = False) -> list[str]:
    """A process `hicache attach` tried: how it was attached (or why not), what its census
    found by holder, what the census cost; with `end`, the holders' growth and the detach."""
    who = f"pid {process.pid} ({process.name})" + (f" rank {process.rank}" if process.rank is not None else "")
    if process.state in ("refused", "unanswered"):
        return [f"{who}: not attached: {process.reason}"]
    how = f" by {process.method} in {process.inject_s:.1f} s" if process.method and process.inject_s is not None else ""
    lines = [f"{who}: attached{how}" + (f"; failed: {process.reason}" if process.state == "failed" else "")]
    if process.works is not None:
        after = f" {process.census_s:.1f} s after attaching" if process.census_s is not None else ""
        held = f"{process.works:,} Works held" if process.works else "no Work held by any Python object"
        lines.append(f"    census{after}: {held}")
        lines += [f"      {_holder_text(h, end)}" for h in process.holders[:HOLDERS_SHOWN]]
        if len(process.holders) > HOLDERS_SHOWN:
            lines.append(f"      ... {len(process.holders) - HOLDERS_SHOWN} more holders in the report")
        if end and process.polled_before is not None:
            lines.append(f"      {process.polled_before.text()} (Works held at attach)")
    if (cost := process.cost) is not None:
        per_million = f", {cost.pause_per_million_s:.2f} s per million objects" if cost.pause_per_million_s else ""
        frozen = f" ({cost.frozen / 1e6:.2f} M of them frozen by gc.freeze())" if cost.frozen else ""
        lines.append(
            f"    census cost: GIL held {cost.snapshot_s + cost.busy_s:.2f} s in all, longest hold "
            f"{cost.max_hold_s * 1000:.0f} ms, {cost.objects / 1e6:.2f} M objects tracked{frozen}{per_million}"
            + ("; cut short (partial)" if cost.truncated else "")
        )
        if cost.unseen:
            lines.append(f"    not examined: {cost.unseen}")
    if end and process.detach_reason:
        left = f"; left behind: {', '.join(process.leftovers)}" if process.leftovers else ""
        lines.append(f"    detached: {process.detach_reason}{left}")
    if end and process.ended is not None:
        lines.append(f"    ended: {process.ended.text()}")
    return lines


def _endings(target: AttachSection) -> str:
    """`every process ended by itself: pid 12 exited with code 0, pid 13 killed by SIGABRT`."""
    ended = [f"pid {p.pid} {p.ended.short()}" for p in target.processes if p.ended is not None]
    return "every process ended by itself" + (f": {', '.join(ended)}" if ended else "")


def _holder_text(holder: HolderCount, end: bool) -> str:
    name = f"`{holder.path}`" if holder.named else holder.path
    grouped = f", {holder.containers} of them" if holder.containers > 1 else ""
    tensors = f", {format_bytes(holder.tensor_bytes)} of tensors beside" if holder.tensor_bytes else ""
    counts = f"{holder.works:>8,} Works {holder.completed:,} completed"
    if end and holder.works_end is not None:
        grew = f"{holder.works_end:,} Works ({holder.growth or 0:+,})"
        counts = f"{holder.works:>8,} -> {grew}, {holder.completed_end or 0:,} completed"
    trend = f", {holder.per_hour:+,.0f}/h" if holder.per_hour is not None else ""
    made = f"; made at {', '.join(holder.sites)}" if holder.sites else ""
    return f"{counts}  {name} ({holder.container}{grouped}{tensors}{trend}){made}"
