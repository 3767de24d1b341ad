"""Plots of reports: RSS and work-list depth against time, one line per rank.

matplotlib is an optional extra (`pip install 'hicache[plot]'`); it is imported only here,
only when a plot is asked for.
"""

from __future__ import annotations

import io
from pathlib import Path

from hicache_cli.analysis.results import Report
from hicache_cli.errors import UsageError
from hicache_cli.rundir import write_atomically

MIB = 1024 * 1024


def _pyplot():  # noqa: ANN202 - the module, typed loosely on purpose
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("plotting needs matplotlib: pip install 'hicache[plot]'") from None
    return plt


def plot_format(out: Path) -> str:
    """The image format for `out`: its suffix's, PNG for a name without one. The file written
    is always the one named: `-o /dev/full` was once written as /dev/full.png."""
    return out.suffix.lstrip(".").lower() or "png"


def plot_reports(reports: list[tuple[str, Report]], out: Path) -> Path:
    """One figure: RSS (top) and depth (bottom) for every rank of every (label, report).

    Returns the path written: `out` itself, whatever its suffix (see plot_format).
    """
    plt = _pyplot()
    if plot_format(out) not in plt.gcf().canvas.get_supported_filetypes():
        plt.close("all")
        raise UsageError(f"{out}: matplotlib cannot write {out.suffix!r} files; use .png, .svg or .pdf")
    fig, (ax_rss, ax_depth) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for label, report in reports:
        for rank in report.ranks:
            series = rank.series
            if series is None:
                continue
            name = f"{label} rank {rank.rank}" if len(reports) > 1 else f"rank {rank.rank} (pp{rank.pp_rank})"
            rss = [None if b is None else b / MIB for b in series.rss_bytes]
            ax_rss.plot(series.t, rss, label=f"{name}: {rank.verdict}")
            ax_depth.plot(series.t, series.depth, label=name)
    first = reports[0][1]
    title = (
        " vs ".join(label for label, _ in reports)
        if len(reports) > 1
        else f"{first.config.title(', ', duration=False)}: {first.verdict}"
    )
    ax_rss.set_title(title)
    ax_rss.set_ylabel("RSS (MiB)")
    ax_depth.set_ylabel("work-list depth (Works)")
    ax_depth.set_xlabel("seconds since the workload started")
    for ax in (ax_rss, ax_depth):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small", loc="upper left")
    fig.tight_layout()
    image = io.BytesIO()
    try:
        fig.savefig(image, dpi=110, format=plot_format(out))
    finally:
        plt.close(fig)
    write_atomically(out, image.getvalue())  # the same write as every other output
    return out
