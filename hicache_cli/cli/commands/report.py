"""Read reports back: show one, diff two, plot any; build one from a run directory."""

from __future__ import annotations

from pathlib import Path

import typer

from hicache_cli.analysis.report import load_report
from hicache_cli.cli.commands import report_build
from hicache_cli.cli.commands.common import check_output_paths
from hicache_cli.present.plot import output_path, plot_reports
from hicache_cli.present.progress import make_console
from hicache_cli.present.report_views import report_diff, report_summary

app = typer.Typer(
    no_args_is_help=True, help="Read reports back: show one, diff two, plot any; build one from a run directory."
)
app.command("build")(report_build.build)  # issue 25: its own module


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
    check_output_paths(output=output_path(out))
    reports = [(str(f), load_report(f)) for f in files]
    path = plot_reports(reports, out)
    make_console(live=False).print(f"wrote {path}", soft_wrap=True)
