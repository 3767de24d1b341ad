"""One description of a results table, rendered to the terminal (rich) and to Markdown:
compare-policies' policy table and sglang-scan's release table."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

from hicache_cli.analysis import compare, scan


@dataclass(frozen=True)
class TableSpec:
    headers: tuple[str, ...]
    right: frozenset[int]  # columns aligned right (figures)
    rows: tuple[tuple[str, ...], ...]
    best: frozenset[tuple[int, int]] = frozenset()  # (row, column) cells marked as the best
    caption: str | None = None  # on the terminal, above the table
    footnote: str | None = None  # in Markdown, below the table
    no_wrap: bool = False  # cells keep their line, the table grows wider


def to_rich(spec: TableSpec) -> Table:
    """Best cells bold and starred (the star survives a terminal without bold)."""
    table = Table(box=None, padding=(0, 1), pad_edge=False, title=spec.caption, title_justify="left")
    for i, header in enumerate(spec.headers):
        table.add_column(header, justify="right" if i in spec.right else "left", no_wrap=spec.no_wrap)
    for r, row in enumerate(spec.rows):
        table.add_row(*(Text(f"{v}*", "bold") if (r, c) in spec.best else Text(v) for c, v in enumerate(row)))
    return table


def to_markdown(spec: TableSpec, title: str) -> str:
    lines = [f"### {title}", "", "| " + " | ".join(spec.headers) + " |", "|" + "---|" * len(spec.headers)]
    for r, row in enumerate(spec.rows):
        lines.append("| " + " | ".join(f"**{v}**" if (r, c) in spec.best else v for c, v in enumerate(row)) + " |")
    if spec.footnote:
        lines += ["", spec.footnote]
    return "\n".join(lines) + "\n"


def policy_table(rows: list[compare.PolicyRow]) -> TableSpec:
    """Policies side by side; the best value of each column among the bounded ones marked.
    Latency and rounds/s are PP0's loop (the one a blocking drain slows); RSS the steepest rank."""
    best = compare.best_of(rows)
    keys = list(compare.HEADERS)
    values = [compare.cells(row) for row in rows]
    notes = " ".join(f"{row.note}." for row in rows if row.note)
    return TableSpec(
        headers=tuple(compare.HEADERS.values()),
        right=frozenset(i for i, k in enumerate(keys) if k not in ("policy", "verdict")),
        rows=tuple(tuple(v[k] for k in keys) for v in values),
        best=frozenset((r, keys.index(k)) for r, row in enumerate(rows) for k, p in best.items() if p == row.policy),
        caption="latency and rounds/s: PP0's loop",
        no_wrap=True,
        footnote="Bold: the best value in its column among the policies that stayed bounded. "
        "Latency and rounds/s are PP0's loop; RSS is the steepest rank." + (f" {notes}" if notes else ""),
    )


def release_table(rows: list[scan.ScanRow]) -> TableSpec:
    figures = ("sends/round", "depth at end", "RSS MB/h")
    return TableSpec(
        headers=scan.HEADERS,
        right=frozenset(i for i, h in enumerate(scan.HEADERS) if h in figures),
        rows=tuple(scan.cells(row) for row in rows),
    )
