"""Plain progress lines while a run goes, and the final per-rank summary table.

Renderers only turn data into text or rich renderables; printing is the caller's.
"""

from __future__ import annotations

import codecs
import io
import os
import re
import sys
from collections.abc import Iterable
from typing import TextIO

from rich.console import Console, ConsoleOptions, RenderableType
from rich.live import Live
from rich.segment import Segment
from rich.table import Table

from hicache_cli.analysis.results import Report
from hicache_cli.present.dashboard import Dashboard, render
from hicache_cli.present.trace_views import trace_lines, trace_table
from hicache_cli.sample import Sample
from hicache_cli.units import format_bytes, format_duration

# What a program's own names may carry that a terminal would act on: C0 and C1 controls (an
# escape sequence that retitles the window or clears the screen) and the bidirectional
# overrides that show text in another order than it is (Trojan Source). \n and \t stay.
_ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def inert(text: str) -> str:
    """`text` with every character a terminal would act on written as its escape (\\x1b,
    \\u202e): names, paths and reasons from a program hicache observes, or from a report
    file, are shown, never obeyed (the page escapes them the same way)."""
    if not _ACTIVE.search(text):
        return text
    return _ACTIVE.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), text)


class RunConsole(Console):
    """A console whose reader may go away (`hicache stress | head`): the run goes on. What it
    renders is inert: text a program or a report put in a name cannot drive the terminal
    (the console's own styles and cursor moves are not text, and pass)."""

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control is None and _ACTIVE.search(segment.text):
                yield Segment(inert(segment.text), segment.style, segment.control)
            else:
                yield segment

    def on_broken_pipe(self) -> None:
        # rich exits here; a run must still finish and write its report, so go quiet.
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.file.fileno())


def ensure_stdout() -> None:
    """Give the process a stdout any command can print anything to, whatever it was given.

    Started with stdout closed (`hicache stress >&-`) Python has none: fd 1 is pointed at
    /dev/null (so no file hicache opens later, and no child, gets it as its stdout) and the
    output is dropped; the run goes on and writes its report. An encoding that cannot spell
    a character (PYTHONIOENCODING=ascii, a non-ASCII run directory) escapes it, never raises.
    """
    if sys.stdout is None:
        try:
            os.fstat(1)
        except OSError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            if devnull != 1:
                os.dup2(devnull, 1)
                os.close(devnull)
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # kept open for the process's life
    elif isinstance(sys.stdout, io.TextIOWrapper) and _may_raise(sys.stdout):
        sys.stdout.reconfigure(errors="backslashreplace")


def _may_raise(stream: io.TextIOWrapper) -> bool:
    """Whether writing some text can raise: strict errors, or surrogateescape (a C locale's)
    on an encoding short of UTF-8, which the dashboard's block characters exceed."""
    utf = codecs.lookup(stream.encoding).name.startswith("utf")
    return stream.errors == "strict" or (stream.errors == "surrogateescape" and not utf)


def stdout_is_terminal() -> bool:
    ensure_stdout()
    return sys.stdout.isatty()


def human_stream(to_stderr: bool = False) -> TextIO:
    """Where a command's human text goes: stdout, or stderr (under `--json`, stdout carries
    the JSON document; a traced program's output has stdout)."""
    ensure_stdout()
    return sys.stderr if to_stderr else sys.stdout


# Off a terminal nothing is wrapped: tables are laid out as wide as they need (never cut),
# and lines are printed whole however long (a CI log or a pipe has no width of its own).
UNWRAPPED_WIDTH = 1000


def user_width() -> int | None:
    """A width the user set for output off a terminal (COLUMNS), if any."""
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def make_console(live: bool, to_stderr: bool = False) -> Console:
    """A console for command output, on stdout or (`to_stderr`) stderr: colours only when
    live, never markup. On a terminal it is as wide as the terminal. Off one rich would wrap
    every line at 80 columns (splitting a pp 4 progress line mid-figure, and long reasons):
    there lines are never wrapped, unless the user sets COLUMNS, which is then the width."""
    stream = human_stream(to_stderr)
    if stream.isatty():
        width, soft_wrap = None, False
    elif (columns := user_width()) is not None:
        width, soft_wrap = columns, False
    else:
        width, soft_wrap = UNWRAPPED_WIDTH, True
    return RunConsole(
        stderr=to_stderr,
        markup=False,
        highlight=False,
        color_system="auto" if live else None,
        width=width,
        soft_wrap=soft_wrap,
    )


class PlainProgress:
    """Prints one line every `interval_s` seconds of run time, and when a rank's state
    changes (so the last line shows how every rank ended): no escape codes."""

    def __init__(self, duration_s: float | None, interval_s: float = 2.0, write=print) -> None:  # noqa: ANN001
        self.duration_s = duration_s
        self.interval_s = interval_s
        self.write = write
        self._next_starting = 0.0  # launch time, while no rank samples yet
        self._next = 0.0  # run time, once they do
        self._states: dict[int, str] = {}  # as the last line printed them

    def __call__(self, samples: dict[int, list[Sample]], elapsed: float) -> None:
        latest = {r: s[-1] for r, s in samples.items() if s}
        if not latest:
            if elapsed >= self._next_starting:
                self.write(f"[{format_duration(elapsed):>6}] starting ranks...")
                self._next_starting = elapsed + self.interval_s
            return
        run_t = max(s.t for s in latest.values())
        states = {r: s.state for r, s in latest.items()}
        if run_t < self._next and states == self._states:
            return
        self._next, self._states = run_t + self.interval_s, states
        self.write(progress_line(latest, self.duration_s))


def progress_line(latest: dict[int, Sample], duration_s: float | None) -> str:
    run_t = max(s.t for s in latest.values())
    parts = [
        f"r{r} {format_bytes(s.rss_bytes)} {'depth' if s.works is None else 'live Works'} {s.depth} rounds {s.rounds}"
        + (f" [{s.state}]" if s.state != "running" else "")
        for r, s in sorted(latest.items())
    ]
    total = f" / {format_duration(duration_s)}" if duration_s is not None else ""  # None: until the program ends
    return f"[{format_duration(run_t):>6}{total}] " + " | ".join(parts)


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def summary_table(report: Report, width: int = 160) -> Table:
    """The per-rank result table; under 110 columns RSS end and p50/max are left out."""
    if report.traced:
        return trace_table(report, width)
    title = f"{report.config.title()}  status={report.status}  verdict={report.verdict}"
    wide = width >= 110
    table = Table(title=title, title_justify="left", box=None, padding=(0, 1), pad_edge=False)
    if wide:
        names = ["rank", "pp/tp", "verdict", "RSS end", "slope MB/h [95%]", "depth max/final", "p50/p99/max ms"]
        names += ["rounds/s", "backlog"]
    else:
        names = ["r", "pp/tp", "verdict", "MB/h [95%]", "depth max/fin", "p99ms", "rnd/s", "backlog"]
    for name in names:
        table.add_column(name, justify="left" if name == "verdict" else "right", no_wrap=name != "backlog")
    for r in report.ranks:
        rss, wl, lat, backlog = r.rss, r.work_list, r.loop_latency, r.backlog_at_stop
        if not r.measured or rss is None or wl is None or lat is None or backlog is None:
            table.add_row(str(r.rank), f"{r.pp_rank}/{r.tp_rank}", r.verdict, *["n/a"] * (len(names) - 3))
            continue
        cells = [str(r.rank), f"{r.pp_rank}/{r.tp_rank}", r.verdict]
        if wide:
            cells.append(format_bytes(rss.end_bytes))
        cells.append(rss.trend_text() or "n/a")
        cells.append(f"{wl.max}/{wl.final}")
        if wide:
            cells.append(f"{_fmt(lat.p50, '.3f')}/{_fmt(lat.p99, '.2f')}/{_fmt(lat.max, '.1f')}")
        else:
            cells.append(_fmt(lat.p99, ".2f"))
        cells.append(_fmt(r.rounds_per_s, ".0f"))
        cells.append(f"{backlog.outstanding_sends}s {backlog.unreceived_messages}r")
        table.add_row(*cells)
    return table


def target_line(report: Report) -> str | None:
    """One line more on what ran, where its kind has one (SGLang's code: which, and what its
    round sends)."""
    return report.target.line() if report.target is not None else None


def verdict_lines(report: Report) -> list[str]:
    if report.traced:
        return trace_lines(report)
    lines = [line] if (line := target_line(report)) else []
    lines += [f"rank {r.rank}: {r.verdict} - {r.verdict_reason}" for r in report.ranks]
    lines += [f"failure: {f.line()}" for f in report.failures]
    return lines


class LiveView:
    """The rich Live dashboard, refreshed by the caller's ticks; leaves its last frame on screen."""

    def __init__(self, dashboard: Dashboard, console: Console) -> None:
        self.dashboard = dashboard
        self.console = console
        self._live = Live(console=console, auto_refresh=False, transient=False, redirect_stdout=False)

    def __enter__(self) -> LiveView:
        self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.stop()

    def __call__(self, samples: dict[int, list[Sample]], elapsed: float) -> None:
        model = self.dashboard.model(samples, elapsed)
        self._live.update(render(model, self.console.width), refresh=True)
