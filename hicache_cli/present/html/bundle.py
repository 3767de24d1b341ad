"""The page of a compare-policies or sglang-scan bundle: its table (the one the terminal and
Markdown show, from present/tables.py), a chart per measure with a line per policy or
release, why each one that was not bounded was not, and the settings they shared."""

from __future__ import annotations

from hicache_cli.analysis.bundles import COMPARE, Bundle
from hicache_cli.analysis.results import RankReport, Report, Verdict
from hicache_cli.present.html import charts
from hicache_cli.present.html.charts import Chart, value
from hicache_cli.present.html.markup import Cell, definitions, esc, readable, table, tag
from hicache_cli.present.html.run import section, verdict_badge
from hicache_cli.present.html.run_charts import chart, rank_line
from hicache_cli.present.tables import TableSpec, policy_table, release_table

# measure -> (which rank of each run is drawn, in words, and how it is picked): as the table
# reads them (analysis/compare.py): RSS of the steepest rank, depth of the deepest, PP0's loop
PICKS = {
    "rss": "the rank with the steepest RSS trend",
    "depth": "the rank whose work list grew deepest",
    "p99": "PP0's loop (rank 0)",
}


def pick_rank(report: Report | None, measure: str) -> RankReport | None:
    """The rank of a policy's or release's run drawn for `measure` (PICKS), or None when no
    rank has a series."""
    ranks = [r for r in report.ranks if r.samples and r.series] if report is not None else []
    if not ranks:
        return None
    if measure == "rss":
        return max(ranks, key=lambda r: value(r.rss.slope_mb_per_h if r.rss else None) or float("-inf"))
    if measure == "depth":
        return max(ranks, key=lambda r: value(r.work_list.max if r.work_list else None) or 0)
    return next((r for r in ranks if r.pp_rank == 0), ranks[0])


def bundle_charts(bundle: Bundle) -> list[Chart]:
    word = "policy" if bundle.kind == COMPARE else "release"
    drawn = []
    for measure, picked in PICKS.items():
        lines = []
        for i, entry in enumerate(bundle.entries):
            if (rank := pick_rank(entry.report, measure)) is not None:
                name = f"{entry.name} (rank {rank.rank}): {entry.verdict}"
                lines.append(rank_line(rank, i, measure, name, trend=measure != "p99"))
        note = f"One line per {word}: {picked}."
        if (c := chart(f"chart-{measure}", measure, lines, note=note)).drawable():
            drawn.append(c)
    return drawn


def html_table(spec: TableSpec, caption: str) -> str:
    """A table description (present/tables.py) as HTML: the best cells bold, figures right."""
    rows = [
        [Cell(esc(v), c in spec.right, (r, c) in spec.best) for c, v in enumerate(row)]
        for r, row in enumerate(spec.rows)
    ]
    foot = tag("p", esc(spec.footnote), class_="note") if spec.footnote else ""
    return table(spec.headers, rows, caption=caption, class_="results wide") + foot


def why_not_bounded(bundle: Bundle) -> str:
    items = [tag("li", esc(e.note)) for e in bundle.entries if e.note]
    for e in bundle.entries:
        if e.report is None:
            continue
        for r in e.report.ranks:
            if r.verdict != Verdict.BOUNDED:
                items.append(
                    tag("li", esc(f"{e.name} rank {r.rank}: ") + verdict_badge(r.verdict) + esc(f" {r.verdict_reason}"))
                )
        for f in e.report.failures:
            items.append(tag("li", esc(f"{e.name} rank {f.rank} {f.kind}: {f.message}")))
    if not items:
        return ""
    return section("why", "Not bounded, and why", tag("ul", "".join(items)))  # fmt: skip


def bundle_title(bundle: Bundle) -> str:
    cfg = bundle.config
    if bundle.kind == COMPARE:
        return (
            f"hicache compare-policies: pp={cfg.get('pp')} tp={cfg.get('tp')}, "
            f"{cfg.get('duration_s')} s per policy, workload {cfg.get('workload')}"
        )
    return f"hicache sglang-scan: pp={cfg.get('pp')}, {cfg.get('duration')} per release ({cfg.get('versions')})"


def bundle_body(bundle: Bundle) -> str:
    if bundle.kind == COMPARE:
        results = html_table(policy_table(bundle.policy_rows()), "Policies side by side")
    else:
        results = html_table(release_table(bundle.scan_rows()), "Releases in order")
        if bundle.changes:
            results += tag("p", esc(f"Verdict changes: {bundle.changes}"), class_="lead")
    drawn = bundle_charts(bundle)
    charts_html = (
        tag("div", "".join(map(charts.render, drawn)), class_="charts")
        if drawn
        else tag("p", "No run wrote a series to draw.")
    )
    settings = definitions(readable(bundle.config))
    facts = tag("p", "Bundle: " + tag("code", esc(bundle.path)), class_="facts") if bundle.path is not None else ""
    head = tag("header", tag("h1", esc(bundle_title(bundle))) + facts)
    main = (
        section("results", "Results", results)
        + section("charts", "Over time", charts_html)
        + why_not_bounded(bundle)
        + section("run", "Shared settings", tag("div", settings, class_="details"))
    )
    return head + tag("main", main)  # fmt: skip
