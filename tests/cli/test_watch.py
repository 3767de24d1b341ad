"""watch: following a run directory (finished, in progress, gone quiet); plain output; the command line."""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from hicache_cli.analysis.report import build_report, write_report
from hicache_cli.cli import running as watch_command  # watch follows a run directory with running.follow
from hicache_cli.cli.main import main
from hicache_cli.config import StressConfig
from hicache_cli.outcome import RunOutcome
from hicache_cli.present.progress import UNWRAPPED_WIDTH, PlainProgress, make_console, summary_table
from hicache_cli.protocol import samples_file as rank_file
from hicache_cli.sample import LineTail, Sample

Run = dict[int, list[Sample]]
MakePP2Run = Callable[..., Run]

CONFIG = StressConfig(pp=2, duration_s=60.0)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def write_samples(run_dir: Path, samples: Run) -> None:
    """Append each rank's samples to its rank file, one JSON line each, as a rank's probe does."""
    for rank, series in samples.items():
        with rank_file(run_dir, rank).open("a", encoding="utf-8") as fh:
            fh.write("".join(s.to_json() + "\n" for s in series))


def write_run(run_dir: Path, samples: Run, *, report: bool = True) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    CONFIG.save(run_dir)
    write_samples(run_dir, samples)
    if report:
        write_report(build_report(CONFIG, samples, RunOutcome(wall_s=61.5)), run_dir)
    return run_dir


class FakeClock:
    """Stands in for the `time` module watch uses: sleeping moves the clock on at once.

    `on_sleep`, when set, runs at each sleep, as the ranks would write meanwhile.
    """

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps = 0
        self.on_sleep: Callable[[], None] | None = None

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(watch_command, "time", fake)
    return fake


class FakeTerminal(io.StringIO):
    """Standard output as a terminal would be: isatty() says so."""

    def isatty(self) -> bool:
        return True


# -- watch on the command line -------------------------------------------------------


def test_watch_a_finished_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, make_pp2_run: MakePP2Run, clock: FakeClock
) -> None:
    run_dir = write_run(tmp_path / "run", make_pp2_run(final=True))
    assert main(["watch", str(run_dir), "--no-live"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    out = captured.out
    assert "\x1b" not in out
    assert "[ 60.0s / 60.0s] r0 98.2 MiB depth 60000 rounds 60000 [done] | r1 " in out
    assert "watch ended: finished" in out
    assert "reap  pp=2 tp=1  60s  status=completed  verdict=LEAK" in out
    assert "rank 0: LEAK - work list grows 1000 Works/s" in out
    assert "rank 1: BOUNDED - RSS" in out
    assert clock.sleeps == 0  # the report was there at the first look


def test_watch_catches_up_on_a_long_run_a_share_at_a_time(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    make_pp2_run: MakePP2Run,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run written before watch started is read in bounded pieces, the view refreshed
    between them, with no pause and no verdict until the last piece is in."""
    run_dir = write_run(tmp_path / "run", make_pp2_run(final=True))
    monkeypatch.setattr(watch_command, "CATCH_UP_BYTES", 4096)
    monkeypatch.setattr(LineTail, "CHUNK", 1024)
    assert main(["watch", str(run_dir), "--no-live"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^reading [0-9.]+ [KM]iB of samples already written; the view follows", out, re.M)
    progress = [line for line in out.splitlines() if line.startswith("[")]
    assert len(progress) > 3 and progress[-1].startswith("[ 60.0s / 60.0s] r0 98.2 MiB depth 60000")
    assert out.index("watch ended: finished") > out.index(progress[-1])
    assert clock.sleeps == 0


def test_watch_a_run_whose_ranks_stopped_without_a_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, make_pp2_run: MakePP2Run, clock: FakeClock
) -> None:
    run_dir = write_run(tmp_path / "run", make_pp2_run(final=True), report=False)
    assert main(["watch", str(run_dir), "--no-live"]) == 0
    out = capsys.readouterr().out
    assert "watch ended: all ranks stopped" in out
    assert "verdict=" not in out  # no report, no summary


def test_watch_follows_a_run_until_its_report_appears(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, make_pp2_run: MakePP2Run, clock: FakeClock
) -> None:
    run = make_pp2_run(final=True)
    early = {rank: [s for s in series if s.t <= 5.0] for rank, series in run.items()}
    rest = {rank: [s for s in series if s.t > 5.0] for rank, series in run.items()}
    run_dir = write_run(tmp_path / "run", early, report=False)

    def ranks_finish() -> None:
        if clock.sleeps == 3:
            write_samples(run_dir, rest)
            write_report(build_report(CONFIG, run, RunOutcome()), run_dir)

    clock.on_sleep = ranks_finish
    assert main(["watch", str(run_dir), "--no-live", "--refresh", "2"]) == 0
    out = capsys.readouterr().out
    assert clock.sleeps == 3
    assert clock.now == pytest.approx(1001.5)  # 3 sleeps of 1 / --refresh
    progress = [line for line in out.splitlines() if line.startswith("[")]
    assert progress[0].startswith("[  5.0s / 60.0s] r0 ")
    assert progress[-1].startswith("[ 60.0s / 60.0s] r0 ")
    assert len(progress) == 2  # nothing new while the run stood still
    assert "watch ended: finished" in out
    assert "verdict=LEAK" in out


def test_watch_gives_up_on_a_run_that_went_quiet(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, make_pp2_run: MakePP2Run, clock: FakeClock
) -> None:
    run = make_pp2_run(final=False)
    run_dir = write_run(tmp_path / "run", {rank: series[:50] for rank, series in run.items()}, report=False)
    assert main(["watch", str(run_dir), "--no-live"]) == 0
    out = capsys.readouterr().out
    assert "watch ended: no new samples for 15 s and no report: the run seems to have stopped" in out
    assert clock.now - 1000.0 > watch_command.STALE_S
    assert clock.now - 1000.0 <= watch_command.STALE_S + 0.25 + 1e-9  # it gave up at the first look after


def test_watch_a_directory_that_is_not_a_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["watch", str(tmp_path), "--no-live"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [f"hicache: error: {tmp_path}: not a run directory (no config.json)"]


@pytest.mark.parametrize("refresh", ["0.1", "21"])
def test_watch_refuses_a_refresh_rate_out_of_range(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, make_pp2_run: MakePP2Run, refresh: str
) -> None:
    run_dir = write_run(tmp_path / "run", make_pp2_run())
    assert main(["watch", str(run_dir), "--no-live", "--refresh", refresh]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert err.startswith("hicache: error: --refresh must be between 0.2 and 20")


def test_watch_with_a_broken_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, make_pp2_run: MakePP2Run
) -> None:
    run_dir = write_run(tmp_path / "run", make_pp2_run())
    (run_dir / "report.json").write_text('{"schema_version": 1, "status": "comp', encoding="utf-8")
    assert main(["watch", str(run_dir), "--no-live"]) == 2
    assert capsys.readouterr().err.startswith(f"hicache: error: {run_dir / 'report.json'}: ")


def test_watch_on_a_terminal_draws_the_dashboard(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, make_pp2_run: MakePP2Run, clock: FakeClock
) -> None:
    run_dir = write_run(tmp_path / "run", make_pp2_run(final=True))
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["watch", str(run_dir)]) == 0
    out = ANSI.sub("", terminal.getvalue())
    assert "verdict so far: LEAK" in out
    assert "p50/p99/max ms" in out  # the dashboard's wide layout: the terminal is 120 columns
    assert out.index("verdict so far: LEAK") < out.index("watch ended: finished") < out.index("status=completed")


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["--help"]) == 0
    out = ANSI.sub("", capsys.readouterr().out)
    for command in ("stress", "watch", "report"):
        assert re.search(rf"^\W*{command}\b", out, re.MULTILINE), out
    assert main(["report", "--help"]) == 0
    out = ANSI.sub("", capsys.readouterr().out)
    for command in ("show", "diff", "plot"):
        assert re.search(rf"^\W*{command}\b", out, re.MULTILINE), out
    assert main(["watch", "--help"]) == 0
    out = ANSI.sub("", capsys.readouterr().out)
    assert "--no-live" in out and "--refresh" in out


# -- plain output ----------------------------------------------------------------------


def test_off_a_terminal_the_console_is_wide_and_plain(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    console = make_console(live=False)
    assert console.width == UNWRAPPED_WIDTH and console.soft_wrap  # tests/present/test_plain_output.py
    assert console.color_system is None


def test_plain_progress_on_a_terminal_has_no_escape_codes(
    monkeypatch: pytest.MonkeyPatch, make_pp2_run: MakePP2Run, make_series: Callable[..., list[Sample]]
) -> None:
    """--no-live on a terminal: the console may know it is one, but writes no escape codes."""
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setenv("COLUMNS", "100")
    console = make_console(live=False)
    run = make_pp2_run(final=False)
    run[1] = make_series(1, final_state="error", message="RuntimeError: boom")
    progress = PlainProgress(CONFIG.duration_s, write=console.print)
    progress({}, 0.0)
    progress(run, 61.0)
    console.print(summary_table(build_report(CONFIG, run, RunOutcome()), console.width))
    out = terminal.getvalue()
    assert "\x1b" not in out
    assert "starting ranks..." in out
    assert "[error]" in out  # brackets are text, not markup
    assert "[ 60.0s / 60.0s]" in out
    assert "status=failed" in out
