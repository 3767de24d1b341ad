"""The page of one run, from its typed report: the verdict per rank and why, the charts,
the figures per rank, the creation sites, the failures, and what ran where."""

from __future__ import annotations

import os
from collections.abc import Callable

from hicache_cli.analysis.results import Failure, RankReport, Report, Site, Status, Verdict, Works
from hicache_cli.analysis.trace_report import poll_text
from hicache_cli.present.html import charts
from hicache_cli.present.html.charts import value
from hicache_cli.present.html.markup import (
    Cell,
    definitions,
    esc,
    interval,
    number,
    readable,
    size,
    table,
    tag,
    text_cell,
)
from hicache_cli.present.html.run_charts import depth_title, rank_name, run_charts


def title(report: Report) -> str:
    """What ran: the policy and shape, the SGLang release, the traced command, the pids (its
    target section says)."""
    ran = report.config.target
    return report.target.title(ran) if report.target is not None else ran.title(None)


def verdict_badge(verdict: object) -> str:
    """The verdict as a coloured word (v-leak, v-bounded, v-inconclusive in page.css)."""
    word = str(verdict)
    known = word.lower() if word in {v.value for v in Verdict} else "other"
    return tag("span", esc(word), class_=f"verdict v-{known}")


def header(report: Report) -> str:
    facts = [f"status {report.status}"]
    if report.run_s:
        facts.append(f"{number(report.run_s, '.1f')} s of workload")
    if report.wall_s:
        facts.append(f"{number(report.wall_s, '.1f')} s in all")
    if report.stopped_early:
        facts.append(str(report.stopped_early))
    if report.program_exit_code is not None:
        facts.append(f"program exit {report.program_exit_code}")
    lines = [tag("h1", esc(f"hicache: {title(report)} ") + verdict_badge(report.verdict))]
    status = esc(facts[0]) if report.status == Status.COMPLETED else tag("strong", esc(facts[0]), class_="bad")
    lines.append(tag("p", ", ".join([status, *map(esc, facts[1:])]), class_="facts"))
    if report.interruption is not None:
        stop = report.interruption
        lines.append(tag("p", esc(f"Interrupted by {stop.signal or 'a signal'} ({stop.to}): {stop.message or ''}")))
    return tag("header", "".join(lines))


def verdicts(report: Report) -> str:
    traced = report.traced
    rows = [
        [text_cell(rank_name(r, traced)), Cell(verdict_badge(r.verdict)), text_cell(r.verdict_reason)]
        for r in report.ranks
    ]
    body = table(["rank", "verdict", "why"], rows, class_="verdicts")
    return section("verdicts", "Verdict per rank", body)


def figures(report: Report) -> str:
    """The report's exact numbers, a column per rank (the charts are thinned; these are not)."""
    traced = report.traced
    ranks = [r for r in report.ranks if r.samples]
    if not ranks:
        return ""
    rows = [
        [text_cell(name), *(text_cell(cell(r), figure=figure) for r in ranks)]
        for name, cell, figure in _figures(traced)
    ]
    headers = ["", *(rank_name(r, traced) for r in ranks)]
    return section("figures", "Figures per rank", table(headers, rows, class_="figures wide"))


def _figures(traced: bool) -> list[tuple[str, Callable[[RankReport], str], bool]]:
    """(what, its text for a rank, a figure?) for each row of the figures table."""

    def rss(r: RankReport) -> str:
        return "\u2013" if r.rss is None else f"{size(r.rss.start_bytes)} \u2192 {size(r.rss.end_bytes)}"

    def anon(r: RankReport) -> str:
        k = r.memory_kinds
        return "\u2013" if k is None else f"{size(k.anon_start_bytes)} \u2192 {size(k.anon_end_bytes)}"

    def depth(r: RankReport) -> str:
        if traced and r.works is not None:
            return f"{number(r.works.live_max, 'd')} / {number(r.works.live_final, 'd')}"
        return "\u2013" if r.work_list is None else f"{number(r.work_list.max, 'd')} / {number(r.work_list.final, 'd')}"

    def latency(r: RankReport) -> str:
        lat = r.loop_latency
        return "\u2013" if lat is None else " / ".join(number(x, ".2f") for x in (lat.p50, lat.p99, lat.max))

    def messages(r: RankReport) -> str:
        m = r.messages
        return "\u2013" if m is None else f"{number(m.sent, 'd')} / {number(m.received, 'd')}"

    def backlog(r: RankReport) -> str:
        b = r.backlog_at_stop
        return "\u2013" if b is None else f"{number(b.outstanding_sends, 'd')} / {number(b.unreceived_messages, 'd')}"

    return [
        ("RSS start \u2192 end", rss, True),
        ("RSS peak", lambda r: size(r.rss.peak_bytes) if r.rss else "\u2013", True),
        ("RSS trend, MB/h [95%]", lambda r: interval(r.rss.slope_mb_per_h, r.rss.slope_ci95_mb_per_h) if r.rss
         else "\u2013", True),
        ("anonymous start \u2192 end", anon, True),
        ("anonymous trend, MB/h [95%]", lambda r: interval(r.memory_kinds.anon_slope_mb_per_h,
         r.memory_kinds.anon_slope_ci95_mb_per_h) if r.memory_kinds else "\u2013", True),
        (f"{depth_title(traced)} max / final", depth, True),
        ("loop p50 / p99 / max, ms", latency, True),
        ("rounds/s", lambda r: number(r.rounds_per_s, ".0f"), True),
        ("messages sent / received", messages, True),
        ("at the stop: sends outstanding / unreceived", backlog, True),
        ("warm-up, s", lambda r: number(r.warmup_s, ".1f"), True),
        ("samples", lambda r: number(r.samples, "d"), True),
        ("stop", lambda r: str(r.stop or r.state or "\u2013"), False),
    ]  # fmt: skip


def chart_section(report: Report) -> str:
    drawn = run_charts(report)
    if not drawn:
        return section("charts", "Over time", tag("p", "No rank wrote a series to draw."))
    intro = tag(
        "p",
        "Each line is a rank (at most 200 points; the figures below are exact). The shaded start "
        "is the warm-up, left out of the trends; a dashed line is the trend the verdict rests on. "
        + tag("span", "Hover or focus a chart (arrow keys step) to read its values.", class_="screen-only"),
        class_="note",
    )
    return section("charts", "Over time", intro + tag("div", "".join(map(charts.render, drawn)), class_="charts"))


def sites(report: Report) -> str:
    """Where a traced program's Works were created and what became of them, per rank."""
    traced = report.traced
    rows = []
    for r in report.ranks:
        works = r.works
        if isinstance(works, Works):
            rows += [_site_row(rank_name(r, traced), s) for s in works.sites if isinstance(s, Site)]
    if not rows:
        return ""
    headers = ["rank", "site", "function", "op", "peer", "created", "waited", "live", "live max", "source", "polled"]
    note = tag(
        "p",
        "Sorted by live Works: a site whose Works stay live was never waited. Polled: where the program "
        "asked is_completed() of them.",
        class_="note",
    )
    return section("sites", "Where Works were created", note + table(headers, rows, class_="sites wide"))


def _site_row(rank: str, s: Site) -> list[Cell]:
    where = tag("span", esc(f"{os.path.basename(str(s.file))}:{s.line}"), class_="mono") + tag(
        "span", esc(s.file), class_="path"
    )
    return [
        text_cell(rank),
        Cell(where),
        text_cell(s.function),
        text_cell(s.op),
        text_cell(number(s.peer, "d"), figure=True),
        text_cell(number(s.created, "d"), figure=True),
        text_cell(number(s.waited, "d"), figure=True),
        text_cell(number(s.live, "d"), figure=True, best=bool(value(s.live))),
        text_cell(number(s.live_max, "d"), figure=True),
        Cell(tag("code", esc(s.source)) if s.source else "\u2013"),
        text_cell(poll_text(s) or "\u2013"),
    ]


def failures(report: Report) -> str:
    if not report.failures:
        return ""
    rows = [_failure_row(f, report.root_cause) for f in report.failures]
    headers = ["rank", "kind", "at s", "exit", "message", "stacks"]
    return section("failures", "Failures", table(headers, rows, class_="failures wide"))


def _failure_row(f: Failure, root: int | None) -> list[Cell]:
    exit_word = f.signal or ("\u2013" if f.exit_code is None else str(f.exit_code))
    kind = f.kind + (" (root cause)" if f.rank is not None and f.rank == root else "")
    if f.consequence_of is not None:
        kind += f", after rank {f.consequence_of}"
    return [
        text_cell("\u2013" if f.rank is None else f"rank {f.rank}"),
        text_cell(kind),
        text_cell(number(f.at_s, ".1f"), figure=True),
        text_cell(exit_word),
        text_cell(f.message),
        Cell(tag("code", esc(f.stack_file)) if f.stack_file else "\u2013"),
    ]


def run_details(report: Report) -> str:
    """What ran (the configuration and target), where (the environment), and the checks."""
    parts = []
    if report.target is not None:
        parts.append(tag("div", tag("h3", "Target") + definitions(readable(report.target.to_dict()))))
    if report.environment is not None:
        parts.append(tag("div", tag("h3", "Environment") + definitions(readable(report.environment.to_dict()))))
    checks = readable(report.pp_consistency.to_dict() if report.pp_consistency is not None else {})
    checks += [("torchrun exit", report.torchrun_exit_code), ("program stopped", report.program_stopped)]
    checks += [("start-up s", report.startup_s), ("hicache CPU s", report.launcher_cpu_s)]
    parts.append(tag("div", tag("h3", "Checks and timings") + definitions(checks)))
    parts.append(tag("div", tag("h3", "Configuration") + definitions(readable(report.config.to_dict()))))
    where = tag("p", "Report: " + tag("code", esc(report.path)), class_="note") if report.path is not None else ""
    return section("run", "The run", tag("div", "".join(parts), class_="details") + where)


def section(key: str, heading: str, body: str) -> str:
    return tag("section", tag("h2", esc(heading), id=f"h-{key}") + body, id=key, aria_labelledby=f"h-{key}")


def run_body(report: Report) -> str:
    """What a reader asks first comes first: the verdicts and any failure, then the pictures
    and the site to fix, then the numbers and the setting."""
    return header(report) + tag(
        "main",
        verdicts(report) + failures(report) + chart_section(report) + sites(report) + figures(report)
        + run_details(report),
    )  # fmt: skip
