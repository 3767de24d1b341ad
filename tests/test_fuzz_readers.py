"""The fuzz of every reader (issue 30): a real stress run and a real trace run (tests/data,
recorded with this hicache; see tests/mutations.py) mutated field by field - the report, the
config.json and the rank files' lines - and every reader of each run on every mutation,
in-process. A reader takes a mutation or refuses it in one line (UsageError); anything else
it raises is a traceback a user would have seen, and fails the test with the mutation named.

Readers are layered as the commands use them, so a mutation the reading layer refuses reaches
no later reader: `load_report` (`report show/diff/plot/html`, `check --baseline`, `watch` at its
end, `hc.load_report`) refuses or gives a typed Report, which every renderer and the gate then
read; `RunConfig.load` refuses a config or gives one `report build` and `watch` run on; a rank
line the decoder does not take is skipped like a torn one, so the run reads as without it.

The unit tier runs each schema path once, in the ways that fit its type (a few seconds);
HICACHE_FUZZ=all runs every mutation in every way (22,297 of them, 36,966 reader calls: two
minutes here).
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from hicache_cli.analysis.baseline import Tolerance, compare, workload_difference
from hicache_cli.analysis.report import load_report
from hicache_cli.analysis.results import Report
from hicache_cli.cli.main import main
from hicache_cli.cli.running import follow
from hicache_cli.config import RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.execution import rebuild_report
from hicache_cli.present.dashboard import Dashboard
from hicache_cli.present.dashboard import render as render_dashboard
from hicache_cli.present.html import render
from hicache_cli.present.progress import PlainProgress, summary_table, verdict_lines
from hicache_cli.present.report_views import report_diff, report_summary
from hicache_cli.protocol import CONFIG_FILE, REPORT_FILE
from hicache_cli.sample import LineDecoder, Sample
from tests.mutations import DEEP, STRESS_RUN, TRACE_RUN, Mutation, load, mutations

RUNS = {"stress": STRESS_RUN, "trace": TRACE_RUN}
SWEEP = os.environ.get("HICACHE_FUZZ") == "all"
WIDTH = 100
SHOWN = 20  # failures listed in a failing test's message


def _console() -> Console:
    """As the commands' console off a terminal (progress.make_console): no markup, no highlighting."""
    return Console(file=io.StringIO(), width=WIDTH, color_system=None, markup=False, highlight=False)


def _print(*renderables: Any) -> None:
    console = _console()
    for renderable in renderables:
        console.print(renderable)


# what reads a Report, given the mutated one and the run's own (the other side of a diff or a gate)
REPORT_READERS: dict[str, Callable[[Report, Report], object]] = {
    "report show": lambda report, own: _print(report_summary(report, WIDTH)),
    "report diff": lambda report, own: _print(report_diff(own, report, "own", "mutated")),
    "watch, at its end": lambda report, own: _print(summary_table(report, WIDTH), *verdict_lines(report)),
    "check --baseline": lambda report, own: (
        workload_difference(report.config, own.config),
        compare(own, report, "baseline", Tolerance()),
    ),
    "report html": lambda report, own: render(report),
}


class Tally:
    """Mutations and reader calls counted; what raised anything but a UsageError, named."""

    def __init__(self) -> None:
        self.mutations = self.calls = self.refused = 0
        self.failures: list[str] = []
        self._read: set[str] = set()

    def seen(self, read: Any) -> bool:
        """Whether a mutation read as this already went through the readers after the first
        (a key deleted reads as its default, as null does): each is read further once."""
        key = json.dumps(read, sort_keys=True, default=repr)
        if key in self._read:
            return True
        self._read.add(key)
        return False

    def call(self, reader: str, mutation: Mutation, run: Callable[[], Any]) -> Any:
        """run() as `reader` on `mutation`: its result, or None when it refused in one line."""
        self.calls += 1
        try:
            return run()
        except UsageError as exc:
            self.refused += 1
            if "\n" in str(exc):
                self.failures.append(f"{reader} on {mutation}: refused in more than one line")
            return None
        except Exception as exc:  # noqa: BLE001 - what the fuzz looks for: anything but a refusal
            self.failures.append(f"{reader} on {mutation}: {type(exc).__name__}: {str(exc)[:160]}")
            return None

    def check(self) -> None:
        assert self.mutations > 0 and self.calls >= self.mutations
        shown = "\n".join(self.failures[:SHOWN])
        assert not self.failures, f"{len(self.failures)} tracebacks in {self.calls} reader calls:\n{shown}"


def _mutated(document: Any) -> Iterator[Mutation]:
    return mutations(document, sweep=SWEEP)


@pytest.mark.parametrize("run", RUNS)
def test_every_report_reader_on_a_mutated_report(run: str, tmp_path: Path) -> None:
    own = load_report(RUNS[run] / REPORT_FILE)
    tally = Tally()
    path = tmp_path / REPORT_FILE
    for mutation in _mutated(load(RUNS[run] / REPORT_FILE)):
        tally.mutations += 1
        path.write_text(mutation.text())
        report = tally.call("load_report", mutation, lambda: load_report(path))
        if report is None or tally.seen(report.to_dict()):
            continue
        for reader, read in REPORT_READERS.items():
            tally.call(reader, mutation, lambda read=read, report=report: read(report, own))
    tally.check()


def _run_readers(tally: Tally, mutation: Mutation, run_dir: Path) -> None:
    """What reads a run directory: its config, `report build`, and `watch` following it
    (its plain progress lines and the live dashboard, both drawn from every poll)."""
    config = tally.call("RunConfig.load", mutation, lambda: RunConfig.load(run_dir))
    if config is None:
        return
    tally.call("report build", mutation, lambda: rebuild_report(run_dir))
    tally.call("watch", mutation, lambda: _watch(run_dir, config))


def _watch(run_dir: Path, config: RunConfig) -> str:
    console = _console()
    plain = PlainProgress(config.duration_s, write=console.print)
    board = Dashboard(config, str(run_dir))

    def view(samples: dict[int, list[Sample]], elapsed: float) -> None:
        plain(samples, elapsed)
        console.print(render_dashboard(board.model(samples, elapsed), WIDTH))

    return follow(run_dir, config, view, 0.0, console.print)  # (the run's report is there: one poll)


@pytest.mark.parametrize("run", RUNS)
def test_run_directory_readers_on_a_mutated_config(run: str, tmp_path: Path) -> None:
    run_dir = Path(shutil.copytree(RUNS[run], tmp_path / "run"))
    tally = Tally()
    for mutation in _mutated(load(RUNS[run] / CONFIG_FILE)):
        tally.mutations += 1
        (run_dir / CONFIG_FILE).write_text(mutation.text())
        _run_readers(tally, mutation, run_dir)
    tally.check()


@pytest.mark.parametrize("run", RUNS)
def test_run_directory_readers_on_a_mutated_sample_line(run: str, tmp_path: Path) -> None:
    """Rank 0's first line (the complete one its state starts from) and its last (the final
    line, how the rank stopped), one field at a time: in the unit tier each mutation on one of
    the two, in turn. A line the decoder refuses is skipped like a torn one: the run is then
    read once as without it."""
    run_dir = Path(shutil.copytree(RUNS[run], tmp_path / "run"))
    rank_file = run_dir / "rank-0.jsonl"
    lines = rank_file.read_text().splitlines()
    tally = Tally()
    for turn, at in enumerate((0, len(lines) - 1)):
        rank_file.write_text("".join(f"{text}\n" for i, text in enumerate(lines) if i != at))
        _run_readers(tally, Mutation(f"line {at}", "skipped", None), run_dir)
        for index, mutation in enumerate(_mutated(json.loads(lines[at]))):
            if not SWEEP and index % 2 != turn:
                continue
            tally.mutations += 1
            text = mutation.line()
            decoded = tally.call("LineDecoder", mutation, lambda text=text, at=at: _decode(lines[:at], text))
            if decoded is None or tally.seen(decoded):
                continue  # None: the run reads as without the line, above
            rank_file.write_text("".join(f"{t}\n" for t in [*lines[:at], text, *lines[at + 1 :]]))
            _run_readers(tally, mutation, run_dir)
    tally.check()


def _decode(before: list[str], text: str) -> dict[str, Any] | None:
    """The fields the decoder takes from `text` after the lines `before` it; None: skipped."""
    decoder = LineDecoder()
    for earlier in before:
        decoder.fields(earlier)
    return decoder.fields(text)


# The commands on a few of the mutations above, for their exit codes (docs/commands.md): 0 (or
# the gate's 1) for a file they read, 2 and one line for one they refuse; never a traceback.
REPORT_CASES: dict[str, Callable[[dict[str, Any]], None]] = {
    "a count that is text": lambda d: d["ranks"][0]["rss"].__setitem__("end_bytes", "x"),
    "a count past 64 bits": lambda d: d["ranks"][0]["work_list"].__setitem__("max", 10**400),
    "a target kind that is a list": lambda d: d["target"].__setitem__("kind", [[0]]),
    "a reason in markup": lambda d: d["ranks"][0].__setitem__("verdict_reason", "[/bold] [link=x]"),
    "a slope of NaN": lambda d: d["ranks"][0]["rss"].__setitem__("slope_mb_per_h", float("nan")),
}
COMMANDS: dict[str, Callable[[Path, Path], list[str]]] = {
    "report show": lambda path, tmp: ["report", "show", str(path)],
    "report diff": lambda path, tmp: ["report", "diff", str(STRESS_RUN / REPORT_FILE), str(path)],
    "report html": lambda path, tmp: ["report", "html", str(path), "-o", str(tmp / "page.html")],
    "report plot": lambda path, tmp: ["report", "plot", str(path), "-o", str(tmp / "plot.png")],
    "check --baseline": lambda path, tmp: [
        "check",
        "--baseline",
        str(path),
        "--duration",
        "3s",
        "--run-dir",
        str(tmp / "gate"),
    ],
}


@pytest.mark.parametrize("case", REPORT_CASES)
def test_the_report_commands_exit_as_documented(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_execute: object
) -> None:
    data = load(STRESS_RUN / REPORT_FILE)
    REPORT_CASES[case](data)
    path = tmp_path / REPORT_FILE
    path.write_text(json.dumps(data))
    for command, argv in COMMANDS.items():
        if command == "report plot" and importlib.util.find_spec("matplotlib") is None:
            continue  # (the plot extra)
        shutil.rmtree(tmp_path / "gate", ignore_errors=True)
        code = main(argv(path, tmp_path))
        captured = capsys.readouterr()
        assert "Traceback" not in captured.out + captured.err, command
        if code == 2:
            (line,) = captured.err.splitlines()
            assert line.startswith(f"hicache: error: {path}") or line.startswith(f"hicache: error: --baseline {path}")
        else:
            assert code in (0, 1), f"{command}: exit {code}, {captured.err[-300:]}"


RUN_CASES: dict[str, tuple[str, Callable[[dict[str, Any]], None]]] = {
    "a config with tp 0": (CONFIG_FILE, lambda d: d["target"].__setitem__("tp", 0)),
    "a config that is a list": (CONFIG_FILE, lambda d: d.__setitem__("target", [1])),
    "a line whose RSS is text": ("rank-0.jsonl", lambda d: d.__setitem__("rss_bytes", "280 MB")),
    "a line whose sites are junk": ("rank-0.jsonl", lambda d: d.__setitem__("sites", [{"live_max": None}, 3])),
    "a line nested past the decoder": ("rank-0.jsonl", lambda d: d.__setitem__("works", "__DEEP__")),
}


@pytest.mark.parametrize("case", RUN_CASES)
@pytest.mark.parametrize("run", RUNS)
def test_the_run_directory_commands_exit_as_documented(
    run: str, case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = Path(shutil.copytree(RUNS[run], tmp_path / "run"))
    name, edit = RUN_CASES[case]
    lines = (run_dir / name).read_text().splitlines() if name != CONFIG_FILE else [(run_dir / name).read_text()]
    data = json.loads(lines[-1])
    edit(data)
    lines[-1] = json.dumps(data).replace('"__DEEP__"', DEEP)
    (run_dir / name).write_text("".join(f"{line}\n" for line in lines))
    for argv in (
        ["report", "build", str(run_dir), "-o", str(tmp_path / "r.json")],
        ["watch", str(run_dir), "--no-live"],
    ):
        code = main(argv)
        captured = capsys.readouterr()
        assert "Traceback" not in captured.out + captured.err
        if code == 2:
            (line,) = captured.err.splitlines()
            assert line.startswith(f"hicache: error: {run_dir / name}: not a hicache run's config (")
        else:
            assert code == 0, f"{argv[:2]}: exit {code}, {captured.err[-300:]}"
