"""Read reports back: show one, diff two, plot any, draw one as a page (`report build`, which
makes one from a run directory, is its own module: report_build.py)."""

from __future__ import annotations

from pathlib import Path

import typer

from hicache_cli.analysis.bundles import load_document
from hicache_cli.analysis.report import load_report
from hicache_cli.cli.configure import check_output_paths
from hicache_cli.present.html import default_output, write_page
from hicache_cli.present.plot import plot_reports
from hicache_cli.present.progress import make_console
from hicache_cli.present.report_views import report_diff, report_summary

app = typer.Typer(
    no_args_is_help=True,
    help="Read reports back: show one, diff two, plot any, draw one as a page; build one from a run directory.",
)


@app.command()
def show(file: Path = typer.Argument(..., help="A report.json, or a run directory holding one.")) -> None:
    """Summary, per-rank table, verdicts and their reasons, failures."""
    report = load_report(file)
    console = make_console(live=False)
    console.print(report_summary(report, console.width))


@app.command()
def diff(
    a: Path = typer.Argument(..., help="The baseline report (or run directory)."),
    b: Path = typer.Argument(..., help="The report to compare with it."),
) -> None:
    """Side by side, rank by rank: verdict, RSS slope, depth, latency and rounds/s, with the change."""
    console = make_console(live=False)
    console.print(report_diff(load_report(a), load_report(b), str(a), str(b)))


@app.command()
def plot(
    files: list[Path] = typer.Argument(..., help="One or more reports (or run directories)."),
    out: Path = typer.Option(Path("hicache-plot.png"), "--output", "-o", help="PNG to write."),
) -> None:
    """RSS and work-list depth against time, one line per rank (needs the plot extra)."""
    check_output_paths(output=out)
    reports = [(str(f), load_report(f)) for f in files]
    path = plot_reports(reports, out)
    make_console(live=False).print(f"wrote {path}", soft_wrap=True)


@app.command()
def html(
    file: Path = typer.Argument(
        ..., help="A report.json, a compare.json or scan.json bundle, or a directory holding one."
    ),
    out: Path = typer.Option(
        None, "--output", "-o", help="The page to write (default: beside what was read, as .html)."
    ),
) -> None:
    """One self-contained HTML page: verdicts, charts over time, sites, failures (opens offline)."""
    doc = load_document(file)
    target = out if out is not None else default_output(doc.path if doc.path is not None else file)
    make_console(live=False).print(f"wrote {write_page(doc, target)}", soft_wrap=True)
