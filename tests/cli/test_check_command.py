"""`hicache check` through main(), on synthetic runs (conftest's FakeExecute: no ranks start);
and what keeps a run going when its output goes away (supervisor.GuardedView, progress.RunConsole)."""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.analysis.settle import Settler
from hicache_cli.cli.main import main
from hicache_cli.launch.supervisor import GuardedView
from hicache_cli.present.progress import RunConsole
from hicache_cli.targets import TracedCommand
from tests.conftest import FakeExecute, assert_refused


@pytest.fixture(autouse=True)
def in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # default run directories land here
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)


def check(tmp_path: Path, *options: str) -> int:
    return main(["check", "--run-dir", str(tmp_path / "run"), "--no-live", *options])


def status_lines(out: str, mark: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line.lstrip().startswith(f"{mark}  ")]


def junit_suite(path: Path) -> ET.Element:
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    return suite


def test_a_leak_fails_with_fail_lines_and_junit(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "reap.xml"
    assert check(tmp_path, "--policy", "reap", "--max-rss-slope", "100MB/h", "--junit", str(junit)) == 1
    out = capsys.readouterr().out

    fails = status_lines(out, "FAIL")
    assert any(line.startswith("FAIL  bounded") and "rank 0 LEAK" in line for line in fails)
    assert any(line.startswith("FAIL  rss-slope") and "exceeds 100 MB/h by 80 MB/h" in line for line in fails)
    assert "hicache check FAIL (reap, pp=2 tp=1)" in out
    assert f"junit: {junit}" in out

    suite = junit_suite(junit)
    assert suite.get("name") == "hicache check reap"
    assert int(suite.get("failures")) == len(fails) == 2
    failed = {c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None}
    assert failed == {"bounded", "rss-slope"}
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["verdict"] == "LEAK"
    assert report["config"]["leak_threshold_mb_per_h"] == 100.0  # the gate's limit is the verdict's threshold


def test_a_bounded_run_passes(fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junit = tmp_path / "drain.xml"
    assert check(tmp_path, "--policy", "drain", "--max-depth", "2", "--max-p99-ms", "5", "--junit", str(junit)) == 0
    out = capsys.readouterr().out

    assert status_lines(out, "FAIL") == []
    assert status_lines(out, "UNDECIDED") == []
    assert len(status_lines(out, "PASS")) == 8  # four assertions on each of two ranks
    assert "hicache check PASS (drain, pp=2 tp=1)" in out
    suite = junit_suite(junit)
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("8", "0", "0")


def test_a_failed_run_is_undecided(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_execute.final = False  # every rank ended without its final line
    assert check(tmp_path, "--policy", "drain") == 3
    out = capsys.readouterr().out
    undecided = status_lines(out, "UNDECIDED")
    assert len(undecided) == 1
    assert undecided[0].startswith("UNDECIDED  run")
    assert "the run failed: rank 0 crash" in undecided[0]
    assert "hicache check UNDECIDED (drain" in out


def test_an_interrupted_run_exits_130_without_judging(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_execute.interrupted = True
    junit = tmp_path / "j.xml"
    assert check(tmp_path, "--policy", "reap", "--junit", str(junit)) == 130
    out = capsys.readouterr().out
    assert status_lines(out, "FAIL") == []
    assert "hicache check FAIL" not in out
    assert not junit.exists()


def test_the_report_copy_is_written(fake_execute: FakeExecute, tmp_path: Path) -> None:
    copy = tmp_path / "copy.json"
    assert check(tmp_path, "--policy", "drain", "--report", str(copy)) == 0
    assert json.loads(copy.read_text()) == json.loads((tmp_path / "run" / "report.json").read_text())
    assert fake_execute.calls[0]["report_copy"] == copy


@pytest.mark.parametrize(
    ("options", "start"),
    [
        (["--duration", "10s", "--max-duration", "20s"], "give --duration or --max-duration, not both"),
        (["--max-rss-slope", "abc"], "--max-rss-slope"),
        (["--max-rss-slope", "0"], "--max-rss-slope"),
        (["--max-depth", "-1"], "--max-depth"),
        (["--max-p99-ms", "0"], "--max-p99-ms"),
        (["--max-p99-ms", "inf"], "--max-p99-ms"),
        (["--max-duration", "169h"], "--max-duration: '169h' is longer than the most allowed, 7 days"),
        (["--duration", "99999999999999999999999999h"], "--duration: '99999999999999999999999999h' is longer"),
        (["--junit", "missing/dir/x.xml"], "--junit"),
        (["--report", "missing/dir/x.json"], "--report"),
        (["--policy", "nope"], "--policy"),
    ],
)
def test_bad_options_give_one_error_line_and_exit_2(
    fake_execute: FakeExecute,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    options: list[str],
    start: str,
) -> None:
    assert_refused(["check", *options], start, capsys, fake_execute, tmp_path)


@pytest.mark.parametrize("options", [["--max-duration", "soon"], ["--max-duration", "2s", "--warmup", "3s"]])
def test_a_bad_max_duration_is_named_as_given(
    fake_execute: FakeExecute, capsys: pytest.CaptureFixture[str], options: list[str]
) -> None:
    assert main(["check", *options]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "--max-duration" in line
    assert "--duration" not in line.replace("--max-duration", "")


def annotations(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("::")]


def test_github_actions_gets_error_annotations(
    fake_execute: FakeExecute, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert check(tmp_path, "--policy", "reap", "--max-rss-slope", "100MB/h") == 1
    lines = annotations(capsys.readouterr().out)
    assert len(lines) == 2
    assert all(line.startswith("::error title=hicache check (reap)::rank 0 ") for line in lines)
    assert any("exceeds 100 MB/h by 80 MB/h" in line for line in lines)


def test_github_actions_gets_warnings_for_undecided(
    fake_execute: FakeExecute, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    fake_execute.final = False
    assert check(tmp_path, "--policy", "drain") == 3
    (line,) = annotations(capsys.readouterr().out)
    assert line.startswith("::warning title=hicache check (drain)::the run failed")


@pytest.mark.parametrize(("env", "policy"), [("true", "drain"), (None, "reap"), ("false", "reap")])
def test_no_annotations_unless_on_github_actions_and_something_is_wrong(
    fake_execute: FakeExecute,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: str | None,
    policy: str,
) -> None:
    if env is not None:
        monkeypatch.setenv("GITHUB_ACTIONS", env)
    check(tmp_path, "--policy", policy)
    assert annotations(capsys.readouterr().out) == []


def test_max_duration_stops_early_once_the_verdict_is_settled(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check(tmp_path, "--policy", "reap", "--max-duration", "60s", "--max-rss-slope", "100MB/h") == 1
    out = capsys.readouterr().out

    (call,) = fake_execute.calls
    settler = call["early_stop"]
    assert isinstance(settler, Settler)
    assert settler.config is call["config"]
    assert call["config"].duration_s == 60.0  # at the latest
    assert settler.config.leak_threshold_mb_per_h == 100.0  # settles on the gate's threshold
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["stopped_early"].startswith("LEAK settled after")
    assert report["run_s"] < 60.0
    assert "LEAK settled after" in out
    assert "hicache check FAIL" in out


def test_without_max_duration_the_run_takes_its_duration(fake_execute: FakeExecute, tmp_path: Path) -> None:
    assert check(tmp_path, "--policy", "reap", "--duration", "12s") == 1
    (call,) = fake_execute.calls
    assert call["early_stop"] is None
    assert call["config"].duration_s == 12.0
    assert call["config"].warmup_s == 3.0  # check's own default


@pytest.mark.parametrize("length", [("--duration", "3s"), ("--duration", "2s"), ("--max-duration", "3s")])
def test_a_short_run_is_not_refused_over_a_warmup_never_given(
    fake_execute: FakeExecute, tmp_path: Path, length: tuple[str, str]
) -> None:
    """Was: `check --duration 3s` -> "--warmup (3s) must be shorter than --duration (3s)"."""
    assert check(tmp_path, "--policy", "drain", *length) in (0, 3)  # run: bounded, or too short to say
    (call,) = fake_execute.calls
    assert call["config"].warmup_s is None  # each rank's own, as on stress


def test_a_warmup_given_is_still_held_to_the_duration(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_refused(
        ["check", "--duration", "3s", "--warmup", "3s"],
        "--warmup (3s) must be shorter than --duration (3s)",
        capsys,
        fake_execute,
        tmp_path,
    )


def test_the_default_duration_is_30s(fake_execute: FakeExecute, tmp_path: Path) -> None:
    check(tmp_path, "--policy", "drain")
    (call,) = fake_execute.calls
    assert (call["config"].duration_s, call["early_stop"]) == (30.0, None)


# when the output goes away


@pytest.fixture
def closed_pipe() -> Iterator[Any]:
    """A pipe whose reader has gone, as stdout is in `hicache check | head -1` once head exits.

    Tests make it sys.stdout in their own body: pytest sets sys.stdout to its capture again
    between a fixture's setup and the test.
    """
    read_end, write_end = os.pipe()
    os.close(read_end)
    pipe = os.fdopen(write_end, "w")
    yield pipe
    pipe.close()


def leads_to(stream: Any) -> str:
    return os.readlink(f"/proc/self/fd/{stream.fileno()}")


def test_a_console_on_a_closed_pipe_goes_quiet_and_does_not_exit(
    closed_pipe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdout", closed_pipe)
    console = RunConsole(markup=False, highlight=False, color_system=None, width=160)
    console.print("the reader has gone")  # rich would raise SystemExit here
    assert console.quiet
    console.print("and later lines are dropped")
    closed_pipe.write("so does anything else written to stdout\n")
    closed_pipe.flush()  # no BrokenPipeError: stdout now leads nowhere
    assert leads_to(closed_pipe) == os.devnull


def test_check_into_a_closed_pipe_still_judges_and_writes_junit(
    fake_execute: FakeExecute, tmp_path: Path, closed_pipe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdout", closed_pipe)
    junit = tmp_path / "reap.xml"
    assert check(tmp_path, "--policy", "reap", "--junit", str(junit)) == 1
    assert int(junit_suite(junit).get("failures")) >= 1
    assert (tmp_path / "run" / "report.json").is_file()
    assert leads_to(closed_pipe) == os.devnull  # the console found the pipe closed, and went quiet


def test_guarded_view_calls_through() -> None:
    ticks: list[tuple[dict[int, list[Any]], float]] = []
    view = GuardedView(lambda samples, elapsed: ticks.append((samples, elapsed)))
    view({0: []}, 1.0)
    view({0: [], 1: []}, 2.0)
    assert ticks == [({0: []}, 1.0), ({0: [], 1: []}, 2.0)]
    assert view.error is None


def test_guarded_view_stops_calling_a_view_whose_output_went_away() -> None:
    calls: list[float] = []
    broken = BrokenPipeError(32, "Broken pipe")

    def tick(samples: dict[int, list[Any]], elapsed: float) -> None:
        calls.append(elapsed)
        raise broken

    view = GuardedView(tick)
    view({}, 1.0)  # swallowed: the run goes on
    view({}, 2.0)
    view({}, 3.0)
    assert calls == [1.0]
    assert view.error is broken


def test_guarded_view_keeps_the_first_error_of_any_os_error() -> None:
    def tick(samples: dict[int, list[Any]], elapsed: float) -> None:
        raise OSError(28, "No space left on device")

    view = GuardedView(tick)
    view({}, 1.0)
    assert isinstance(view.error, OSError)
    assert view.error.errno == 28


def test_guarded_view_lets_other_errors_through() -> None:
    def tick(samples: dict[int, list[Any]], elapsed: float) -> None:
        raise KeyError("a bug in the view")

    view = GuardedView(tick)
    with pytest.raises(KeyError):
        view({}, 1.0)
    assert view.error is None
    with pytest.raises(KeyError):  # still called: only lost output stops it
        view({}, 2.0)


@pytest.mark.parametrize(
    ("given", "option"),
    [
        (["--pp", "2"], "--pp"),  # the default's own value, given: still refused
        (["--seed", "0"], "--seed"),
        (["--policy", "drain"], "--policy"),
        (["--target", "model"], "--target"),
        (["--fault", "lag:1:5"], "--fault"),
        (["--pp-backend", "gloo"], "--pp-backend"),
        (["--sglang-class", "auto"], "--sglang-class"),  # its whole panel of --help
        (["--port", "29500"], "--port"),
    ],
)
def test_a_model_option_given_with_a_program_is_refused_whatever_its_value(
    given: list[str], option: str, capsys: pytest.CaptureFixture[str], fake_execute: Any, tmp_path: Path
) -> None:
    """Whether an option was given is click's parameter source, not a comparison with its default."""
    argv = ["check", *given, "--", sys.executable, "-c", "pass"]
    assert_refused(argv, f"{option} shapes hicache's own workload", capsys, fake_execute, tmp_path)


def test_a_traced_program_keeps_its_loop_and_finds_its_own_warmup(fake_execute: FakeExecute, tmp_path: Path) -> None:
    """`check --loop MOD:FN -- COMMAND`: the loop is the program's (never refused as if no
    program were given), and its warm-up is found from the data, not check's own default."""
    check(tmp_path, "--duration", "5s", "--loop", "app:step", "--", sys.executable, "app.py")
    (call,) = fake_execute.calls
    target = call["config"].target
    assert isinstance(target, TracedCommand) and target.loop == "app:step"
    assert call["config"].warmup_s is None
