"""`--html FILE` on the commands that run something (stress, trace, attach, check,
compare-policies, sglang-scan), through main() on synthetic runs (conftest's FakeExecute: no ranks start):
the path checked before anything runs, the page written after the report, also for a run
that leaked, failed or was interrupted, and said where it went. A real run's page:
tests/integration/test_html_option_real.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hicache_cli.cli import configure
from hicache_cli.cli.commands import sglang_scan as scan_command
from hicache_cli.cli.main import main
from hicache_cli.cli.options import Measurement, Ranks
from hicache_cli.config import RunConfig, StressConfig
from hicache_cli.present.html import write_page
from tests.cli.test_html_page import Page
from tests.conftest import FakeExecute, assert_refused, build_pp2_report


@pytest.fixture(autouse=True)
def in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # default run directories land here
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


@pytest.fixture
def one_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """sglang-scan of one release, 0.5.12, run as hicache's model (no fetch: the per-release
    config is the model's, so FakeExecute runs it as it runs any other)."""
    monkeypatch.setattr(scan_command, "release_versions", lambda say: ["0.5.12"])
    built = configure.ranks_config

    def release_as_model(ranks: Ranks, *args: Any, **kwargs: Any) -> RunConfig:
        return StressConfig(duration_s=10.0) if ranks.target.startswith("sglang==") else built(ranks, *args, **kwargs)

    monkeypatch.setattr(configure, "ranks_config", release_as_model)


@pytest.fixture
def attachable(monkeypatch: pytest.MonkeyPatch) -> None:
    """`attach 4242` taken as a process to follow (no /proc checks: FakeExecute attaches to
    nothing), followed as a traced program is."""
    config = configure.trace_config(["python"], None, Measurement(duration="10s", stall_timeout="60s"))
    monkeypatch.setattr(configure, "attach_config", lambda *a, **k: config)


RUNS = {
    "stress": ["stress", "--duration", "10s"],
    "trace": ["trace", "--duration", "10s", "--", "python", "-c", "pass"],
    "attach": ["attach", "4242"],
    "check": ["check", "--duration", "10s"],
    "compare-policies": ["compare-policies", "--policies", "drain,reap", "--duration", "10s"],
    "sglang-scan": ["sglang-scan", "--versions", "0.5.12", "--duration", "10s"],
}


# what each run's page says: reap leaks (stress' default policy, the scan's model), drain
# (check's default) and FakeExecute's traced program stay bounded
VERDICTS = {
    "stress": ["LEAK"],
    "trace": ["BOUNDED"],
    "attach": ["BOUNDED"],
    "check": ["BOUNDED"],
    "compare-policies": ["drain", "BOUNDED", "reap", "LEAK"],
    "sglang-scan": ["0.5.12", "LEAK"],
}


def argv(command: str, tmp_path: Path, *more: str) -> list[str]:
    """The command's line with `more` options, before a traced program's `--`."""
    words = RUNS[command]
    cut = words.index("--") if "--" in words else len(words)
    return [*words[:cut], "--no-live", "--run-dir", str(tmp_path / "run"), *more, *words[cut:]]


def page_of(path: Path) -> tuple[Page, str]:
    """The page parsed, and its text; it must be self-contained: no element loads anything."""
    text = path.read_text()
    page = Page(text)
    loads = [a for tag, a, _ in page.elements if tag != "a" and ({"src", "href"} & a.keys())]
    assert loads == [], "a self-contained page loads nothing"
    return page, " ".join(page.text)


@pytest.mark.parametrize("command", list(RUNS))
@pytest.mark.usefixtures("one_release", "attachable")  # every command can run
def test_each_command_writes_its_page_and_says_where(
    command: str,
    fake_execute: FakeExecute,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out.html"
    code = main(argv(command, tmp_path, "--html", str(out)))
    captured = capsys.readouterr()
    assert f"html: {out}" in (captured.out + captured.err).splitlines()
    assert code == 0  # bounded, or a leak: a finding, not an error
    page, text = page_of(out)
    if command in ("compare-policies", "sglang-scan"):
        assert page.charts()["chart-rss"] == (2 if command == "compare-policies" else 1)  # a line per run
        assert "Shared settings" in text
    else:
        assert page.charts()["chart-rss"] == 2  # a line per rank
        assert str(tmp_path / "run") in text  # this run's page
    assert all(word in text for word in VERDICTS[command])


def test_the_page_follows_the_report_and_carries_the_verdict(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, copy = tmp_path / "page.html", tmp_path / "copy.json"
    assert main(argv("stress", tmp_path, "--policy", "reap", "--report", str(copy), "--html", str(out))) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines.index(f"report: {tmp_path / 'run' / 'report.json'}") + 1 == lines.index(f"html: {out}")
    _, text = page_of(out)
    assert "LEAK" in text and str(tmp_path / "run") in text


def test_a_failed_run_still_gets_its_page(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_execute.final = False  # the ranks crashed: exit 3, a report all the same
    out = tmp_path / "out.html"
    assert main(argv("stress", tmp_path, "--html", str(out))) == 3
    page, _ = page_of(out)
    assert any(a.get("id") == "failures" for a in page.all("section"))


@pytest.mark.parametrize("command", ["stress", "check"])
def test_an_interrupted_run_still_gets_its_page(
    command: str, fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_execute.interrupted = True
    out = tmp_path / "out.html"
    assert main(argv(command, tmp_path, "--html", str(out))) == 130
    assert f"html: {out}" in capsys.readouterr().out.splitlines()
    assert out.exists()


def test_under_json_the_line_goes_to_stderr(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.html"
    assert main(argv("stress", tmp_path, "--json", "--html", str(out))) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("{") and "html:" not in captured.out
    assert f"html: {out}" in captured.err.splitlines()


def test_a_page_hicache_wrote_before_is_written_again(fake_execute: FakeExecute, tmp_path: Path) -> None:
    out = write_page(build_pp2_report(leaking=False), tmp_path / "out.html")
    before = out.read_text()
    assert main(argv("stress", tmp_path, "--html", str(out))) == 0
    assert out.read_text() != before and "LEAK" in page_of(out)[1]  # this run's (reap), not the old one


# -- refused before anything runs ----------------------------------------------------


def outside(tmp_path: Path, name: str) -> Path:
    """A new directory beside the run's (a path the command has no reason to touch)."""
    elsewhere = tmp_path.parent / f"{tmp_path.name}-{name}"
    elsewhere.mkdir()
    return elsewhere


@pytest.mark.parametrize("command", list(RUNS))
@pytest.mark.usefixtures("one_release", "attachable")  # every command can run
def test_a_file_hicache_did_not_write_is_refused_before_the_run(
    command: str,
    fake_execute: FakeExecute,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    theirs = outside(tmp_path, "notes") / "notes.html"
    theirs.write_text("<html>my notes</html>")
    refusal = f"{theirs} exists and is not a page hicache wrote; remove it or choose another file with --html"
    assert_refused(argv(command, tmp_path, "--html", str(theirs)), refusal, capsys, fake_execute, tmp_path)
    assert theirs.read_text() == "<html>my notes</html>"


# each command's other file, named as --html's path too
OTHER_OUTPUT = {
    "stress": "--report",
    "trace": "--report",
    "attach": "--report",
    "check": "--junit",
    "compare-policies": "--markdown",
    "sglang-scan": "--output",
}


@pytest.mark.parametrize("command", list(RUNS))
@pytest.mark.usefixtures("one_release", "attachable")  # every command can run
def test_one_file_named_by_two_outputs_is_refused_before_the_run(
    command: str,
    fake_execute: FakeExecute,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    elsewhere = outside(tmp_path, "both")
    path = elsewhere / "out"  # new: only the clash can refuse it
    both = argv(command, tmp_path, OTHER_OUTPUT[command], str(path), "--html", str(elsewhere / "." / "out"))
    refusal = f"{OTHER_OUTPUT[command]} and --html both name {path}: each writes a file of its own"
    assert_refused(both, refusal, capsys, fake_execute, tmp_path)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("command", list(RUNS))
@pytest.mark.usefixtures("one_release", "attachable")  # every command can run
@pytest.mark.parametrize(
    ("where", "problem"),
    [
        ("{tmp}", "a directory, not a regular file"),
        ("{tmp}/missing/out.html", "directory {tmp}/missing does not exist"),
    ],
)
def test_a_path_that_cannot_take_a_page_is_one_line(
    command: str,
    where: str,
    problem: str,
    fake_execute: FakeExecute,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    elsewhere = tmp_path.parent / f"{tmp_path.name}-out"
    elsewhere.mkdir(exist_ok=True)
    path, why = where.format(tmp=elsewhere), problem.format(tmp=elsewhere)
    assert_refused(argv(command, tmp_path, "--html", path), f"--html {path}: {why}", capsys, fake_execute, tmp_path)


def test_another_node_is_told_node_0_writes_it(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = ["--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "127.0.0.1:29400"]
    assert_refused(
        argv("stress", tmp_path, *options, "--html", str(tmp_path.parent / "x.html")),
        "--html: node 0 writes the report; give it there",
        capsys,
        fake_execute,
        tmp_path,
    )


# -- a page that cannot be written at the end ------------------------------------------


def test_a_file_put_there_during_the_run_is_kept_and_the_result_stands(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked before the run, the path can still be taken meanwhile: that file is never
    replaced, a warning says so, and the exit code is the run's."""
    out = tmp_path / "out.html"

    def someone_writes_there(*args: Any, **kwargs: Any) -> Any:
        out.write_text("their file")
        return fake_execute(*args, **kwargs)

    from hicache_cli.cli import running

    monkeypatch.setattr(running, "execute", someone_writes_there)
    assert main(argv("check", tmp_path, "--html", str(out))) == 0  # drain: bounded, the gate passes
    captured = capsys.readouterr()
    assert out.read_text() == "their file"
    assert f"hicache: warning: --html: {out} exists and is not a page hicache wrote" in captured.err
    assert "html:" not in captured.out
