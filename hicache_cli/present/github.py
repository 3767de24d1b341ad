"""What GitHub Actions shows: workflow-command annotations, escaped as the runner requires,
and the Markdown a step appends to its summary ($GITHUB_STEP_SUMMARY). Text only: the
command writes it."""

from __future__ import annotations

import re

from hicache_cli.analysis.compare import PolicyRow
from hicache_cli.analysis.gate import Assertion
from hicache_cli.analysis.kinds import Verdict
from hicache_cli.analysis.results import RankReport, Report
from hicache_cli.analysis.scan import ScanRow
from hicache_cli.present import mermaid
from hicache_cli.present.html.bundle import pick_rank
from hicache_cli.present.html.run_charts import depth_title, rank_name
from hicache_cli.present.tables import policy_table, release_table, to_markdown
from hicache_cli.workflow_commands import escape_data, escape_property

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


def github_annotations(results: list[Assertion], policy: str) -> list[str]:
    """`::error` for each failed assertion, `::warning` for each undecided one."""
    title = escape_property(f"hicache check ({policy})")
    lines = []
    for a in results:
        if a.passed is False:
            lines.append(f"::error title={title}::{escape_data(a.message)}")
        elif a.passed is None:
            lines.append(f"::warning title={title}::{escape_data(a.message)}")
    return lines


_MARKDOWN = re.compile(r"([\\`*_\[\]|#])")


def md(text: str) -> str:
    """Plain text in a Markdown table cell or list item: no accidental emphasis, links,
    code or cell ends; no HTML (GitHub renders it in summaries)."""
    flat = " ".join(str(text).split())
    return _MARKDOWN.sub(r"\\\1", flat).replace("<", "&lt;").replace(">", "&gt;")


def _slope_cell(rank: RankReport) -> str:
    return (rank.rss.trend_text(", ") if rank.rss else None) or "n/a"


def _p99_cell(rank: RankReport) -> str:
    p99 = rank.loop_latency.p99 if rank.loop_latency else None
    return "n/a" if p99 is None else f"{p99:.2f}"


def check_summary(report: Report, results: list[Assertion], result: str, what: str, report_path: str | None) -> str:
    """The gate in a step summary: the result, a row per rank with what failed on it, then
    every failed and undecided assertion's message."""
    by_rank: dict[int | None, list[Assertion]] = {}
    for a in results:
        by_rank.setdefault(a.rank, []).append(a)
    lines = [
        f"### hicache check {result}: {md(what)}",
        "",
        f"Run {report.status}, verdict **{report.verdict}**; {report.run_s or 0:.1f} s of workload.",
        "",
        "| rank | pp/tp | verdict | RSS MB/h [95%] | depth max/final | loop p99 ms | failed |",
        "|---:|---|---|---:|---:|---:|---|",
    ]
    for r in report.ranks:
        failed = [a.name for a in by_rank.get(r.rank, []) if a.passed is False]
        sampled = r.measured and r.work_list is not None
        depth = f"{r.work_list.max}/{r.work_list.final}" if sampled and r.work_list else "n/a"
        cells = [str(r.rank), f"{r.pp_rank}/{r.tp_rank}", r.verdict]
        cells += [_slope_cell(r) if sampled else "n/a", depth, _p99_cell(r) if sampled else "n/a"]
        cells.append(", ".join(failed) or "-")
        lines.append("| " + " | ".join(md(c) for c in cells) + " |")
    for word, passed in (("Failed", False), ("Undecided", None)):
        found = [a for a in results if a.passed is passed]
        if found:
            lines += ["", f"**{word}**", ""]
            lines += [f"- `{a.name}`: {md(a.message)}" for a in found]
    if charts := summary_charts(report):
        lines += ["", charts]
    if report_path:
        lines += ["", f"Report: `{report_path}`"]
    return "\n".join(lines) + "\n"


def summary_charts(report: Report) -> str:
    """RSS and live Works per rank as charts GitHub draws (present/mermaid.py), after a
    sentence naming each line's colour; empty when no rank has a series."""
    ranks = mermaid.shown_ranks(report)
    blocks = mermaid.rank_charts(report, ranks)
    if not blocks:
        return ""
    traced = report.traced
    names = [f"{rank_name(r, traced)} {r.verdict} ({mermaid.COLOURS[i][1]})" for i, r in enumerate(ranks)]
    more = sum(1 for r in report.ranks if r.series) - len(ranks)
    lines = ", ".join(names) + (f"; {more} more ranks in the report" if more > 0 else "")
    sentence = (
        f"**RSS and {depth_title(traced)} over time**: {md(lines)}. "
        f"{mermaid.POINTS} points per line, thinned; the table's numbers are exact."
    )
    return "\n\n".join([sentence, *blocks])


def scan_summary(rows: list[ScanRow], title: str, change: str | None) -> str:
    """sglang-scan in a step summary: its Markdown table, the release where the verdict
    changes, and why each release that was not judged was not."""
    text = to_markdown(release_table(rows), md(title))
    if change is not None:
        text += f"\nVerdict changes: {md(change)}\n"
    notes = [f"- {md(row.version)}: {md(row.note)}" for row in rows if row.note]
    if notes:
        text += "\n**Not judged, and why**\n\n" + "\n".join(notes) + "\n"
    return text


def compare_summary(rows: list[PolicyRow], reports: list[Report], title: str) -> str:
    """compare-policies in a step summary: its Markdown table, then why each rank that was
    not bounded was not, and each failure, then RSS and depth over time, a line per policy."""
    text = to_markdown(policy_table(rows), md(title))
    reasons = [f"- {md(row.note)}" for row in rows if row.note]
    for report in reports:
        policy = report.config.label
        for r in report.ranks:
            if r.verdict != Verdict.BOUNDED:
                reasons.append(f"- {md(policy)} rank {r.rank}: {r.verdict} - {md(r.verdict_reason)}")
        for f in report.failures:
            reasons.append(f"- {md(policy)} rank {f.rank} {f.kind}: {md(f.message)}")
    if reasons:
        text += "\n**Not bounded, and why**\n\n" + "\n".join(reasons) + "\n"
    if charts := comparison_charts(reports):
        text += "\n" + charts + "\n"
    return text


def comparison_charts(reports: list[Report]) -> str:
    """RSS and work-list depth of each policy's run as charts GitHub draws, after a sentence
    naming each line's colour and which rank it is; empty when no run has a series."""
    runs = mermaid.shown_runs(reports)
    blocks = mermaid.run_charts(runs)
    if not blocks:
        return ""
    names = [f"{r.config.label} {r.verdict} ({mermaid.COLOURS[i][1]})" for i, r in enumerate(runs)]
    more = sum(1 for r in reports if pick_rank(r, "rss") is not None) - len(runs)
    lines = ", ".join(names) + (f"; {more} more in the bundle" if more > 0 else "")
    sentence = (
        f"**RSS and work-list depth over time, a line per policy**: {md(lines)}. Each line is the rank "
        f"the table reads: RSS of the steepest RSS trend, depth of the deepest work list. "
        f"{mermaid.POINTS} points per line, thinned; the table's numbers are exact."
    )
    return "\n\n".join([sentence, *blocks])
