"""Runs side by side (compare-policies, sglang-scan): each run of the series in a directory of
its own, one after another; then the bundle written, its table printed and drawn (Markdown,
the GitHub step summary, the page) and its JSON document."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from hicache_cli.analysis.bundles import Bundle
from hicache_cli.analysis.results import Report
from hicache_cli.cli.options import Outputs, Progress
from hicache_cli.cli.output import append_step_summary, print_json, write_html
from hicache_cli.cli.running import run_with_progress, wants_live
from hicache_cli.config import RunConfig
from hicache_cli.lifecycle import STOPS
from hicache_cli.present.progress import make_console
from hicache_cli.present.tables import TableSpec, to_markdown, to_rich
from hicache_cli.rundir import create_run_dir, write_atomically, write_run_file


@dataclass(frozen=True)
class Step:
    """One run of a series: its name (its directory under the series'), and how to make its
    config, which may instead say why it is not run (not applicable)."""

    name: str
    prepare: Callable[[], RunConfig | str]

    @classmethod
    def of(cls, config: RunConfig, why_not: str | None = None) -> Step:
        """A step whose config is made already; with `why_not`, not run for that reason."""
        return cls(config.label, lambda: config if why_not is None else why_not)


def run_series(
    steps: list[Step],
    parent: Path,
    console: Console,
    live: bool,
    detail: Callable[[RunConfig], str] = lambda config: "",
    summary: Callable[[Report], str] = lambda report: str(report.verdict),
) -> list[tuple[Step, RunConfig | str, Report | None]]:
    """Run each step in a directory of its own under `parent`, one after another, saying
    where the series is: `[2/5] drain ...`, then `summary(report)`; a step that is not run
    says why. Ends after a run that was interrupted. Returns each step taken, with its config
    (or why it was not run) and its report."""
    done: list[tuple[Step, RunConfig | str, Report | None]] = []
    for i, step in enumerate(steps, 1):
        where = f"[{i}/{len(steps)}] {step.name}"
        config = step.prepare()
        if isinstance(config, str):
            console.print(f"{where}: {config}")
            done.append((step, config, None))
            continue
        console.print(f"{where}{detail(config)} ...")
        result = run_with_progress(config, create_run_dir(parent / step.name, config.label), console, live)
        assert result.report is not None  # one machine: the report is written here
        done.append((step, config, result.report))
        console.print(f"{where}: {summary(result.report)}")
        if result.report.interrupted or STOPS.signal is not None:
            break
    return done


def open_series(outputs: Outputs, progress: Progress, name: str) -> tuple[Path, Console, bool]:
    """The series' directory (its runs' below it), the console it speaks on, whether live."""
    parent = create_run_dir(outputs.run_dir, name)
    live = wants_live(progress.no_live, outputs.json_output)
    return parent, make_console(live, outputs.json_output), live


def shared_settings(configs: list[RunConfig]) -> dict[str, Any]:
    """The settings every run of the series shares (a bundle's `config`): the run's and its
    target's side by side, each only where every run has the same value."""
    dicts = [{**c.to_dict(), **c.target.to_dict()} for c in configs]
    return {k: v for k, v in dicts[0].items() if k != "target" and all(d.get(k) == v for d in dicts)}


def end_series(
    data: dict[str, Any],
    path: Path,
    table: TableSpec,
    title: str,
    step_summary: str,
    outputs: Outputs,
    console: Console,
    notes: list[str],
    also: Callable[[], None] | None = None,
) -> None:
    """The bundle `data` written to `path` (and --output), its table and `notes` printed, the
    table as Markdown (--markdown) under `title`, the step summary; `also` (compare's --plot),
    then where the bundle is, its page (--html) and its JSON document (--json)."""
    text = json.dumps(data, indent=2) + "\n"
    write_run_file(path, text)
    if outputs.output is not None:
        write_atomically(outputs.output, text)
    console.print(to_rich(table))
    for note in notes:
        console.print(note)
    if outputs.markdown is not None:
        write_atomically(outputs.markdown, to_markdown(table, title))
    append_step_summary(step_summary)
    if also is not None:
        also()
    console.print(f"bundle: {path}")
    write_html(Bundle.read(data, path), outputs.html, console)
    if outputs.json_output:
        print_json(data)
