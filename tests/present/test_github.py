"""GitHub Actions: annotations escaped as the runner requires, and the step summary that
`check`, `compare-policies` and `sglang-scan` append (synthetic runs, conftest's FakeExecute)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from hicache_cli.analysis.compare import summarize
from hicache_cli.analysis.gate import Assertion, Thresholds, evaluate
from hicache_cli.analysis.report import RunOutcome, build_report
from hicache_cli.cli import configure
from hicache_cli.cli.commands import sglang_scan as scan_command
from hicache_cli.cli.main import main
from hicache_cli.cli.options import Ranks
from hicache_cli.config import StressConfig
from hicache_cli.present import mermaid
from hicache_cli.present.github import (
    check_summary,
    compare_summary,
    escape_data,
    escape_property,
    github_annotations,
    md,
    summary_charts,
)
from hicache_cli.sglang_target.extract import NotApplicable
from tests.conftest import FakeExecute, build_pp2_report, build_series


def test_messages_escape_percent_and_line_ends() -> None:
    assert escape_data("50% of\r\nit") == "50%25 of%0D%0Ait"


def test_properties_also_escape_colon_and_comma() -> None:
    assert escape_property("trace of a:b, c\n") == "trace of a%3Ab%2C c%0A"


def test_annotation_titles_are_properties() -> None:
    (line,) = github_annotations([Assertion(0, "bounded", False, "a: b, c")], "sglang:~/src, patched")
    assert line == "::error title=hicache check (sglang%3A~/src%2C patched)::a: b, c"


def test_markdown_cells_are_plain_text() -> None:
    assert md("a | b *c* _d_ `e` [f](g) <h>\n i") == r"a \| b \*c\* \_d\_ \`e\` \[f\](g) &lt;h&gt; i"


def test_check_summary_has_the_table_and_the_reasons() -> None:
    report = build_pp2_report(leaking=True)
    results = evaluate(report, Thresholds(max_depth=2))
    text = check_summary(report, results, "FAIL", "reap, pp=2 tp=1", "runs/r/report.json")
    lines = text.splitlines()
    assert lines[0] == "### hicache check FAIL: reap, pp=2 tp=1"
    assert "verdict **LEAK**" in lines[2]
    assert lines[4].startswith("| rank | pp/tp | verdict | RSS MB/h [95%] |")
    row0 = next(line for line in lines if line.startswith("| 0 |"))
    assert "| LEAK |" in row0 and row0.endswith("| bounded, max-depth |")
    assert next(line for line in lines if line.startswith("| 1 |")).endswith("| - |")
    failed = lines[lines.index("**Failed**") + 2 :]
    assert failed[0].startswith(
        "- `bounded`: rank 0 LEAK: work list grows 1000 Works/s (final 60000); RSS +180 MB/h \\[95%"
    )
    assert failed[1].startswith("- `max-depth`: rank 0 work list reached")
    assert lines[-1] == "Report: `runs/r/report.json`"


def _mermaid_blocks(text: str) -> list[list[str]]:
    """The lines of each ```mermaid block in `text`."""
    blocks = text.split("```mermaid\n")[1:]
    return [block.split("\n```")[0].splitlines() for block in blocks]


def test_check_summary_draws_rss_and_depth_per_rank_for_github() -> None:
    """Two xychart-beta charts, a line per rank on one time grid, coloured in the order the
    sentence above them names; the y axis of a flat rank is not zoomed into its noise."""
    report = build_pp2_report(leaking=True)
    text = check_summary(report, evaluate(report, Thresholds()), "FAIL", "reap", None)
    rss, depth = _mermaid_blocks(text)
    assert rss[0] == mermaid.INIT and rss[1] == "xychart-beta"
    assert rss[2] == '    title "RSS (MiB)"' and depth[2] == '    title "work-list depth (Works)"'
    assert rss[3] == '    x-axis "seconds" 0 --> 60'
    for block in (rss, depth):
        lines = [json.loads(line.split("line ", 1)[1]) for line in block if line.startswith("    line [")]
        assert [len(line) for line in lines] == [mermaid.POINTS, mermaid.POINTS]
    growing, flat = (json.loads(line.split("line ", 1)[1]) for line in depth if "line [" in line)
    assert growing[-1] == 60000 and growing == sorted(growing) and set(flat) == {0}
    assert "rank 0 (pp 0) LEAK (blue), rank 1 (pp 1) BOUNDED (orange)." in text
    assert text.index("| rank |") < text.index("**Failed**") < text.index("```mermaid")  # after today's Markdown


def test_summary_charts_keep_the_lines_few_leaks_first() -> None:
    config = StressConfig(pp=6, policy="reap", duration_s=10.0)
    runs = {
        r: build_series(r, n=100, depth_per_s=1000 if r == 4 else 0.0, rss_per_s=5e5 if r == 4 else 0.0)
        for r in range(6)
    }
    report = build_report(config, runs, RunOutcome())
    text = summary_charts(report)
    (rss, _) = _mermaid_blocks(text)
    assert sum(line.startswith("    line [") for line in rss) == mermaid.MAX_LINES
    assert "rank 0 (pp 0) BOUNDED (blue)" in text and "rank 4 (pp 4) LEAK (pink)" in text
    assert "rank 5" not in text and "; 2 more ranks in the report." in text


def test_no_series_no_charts() -> None:
    report = build_pp2_report(leaking=False)
    bare = replace(report, ranks=[replace(r, series=None) for r in report.ranks])
    assert summary_charts(bare) == ""


def test_compare_summary_has_the_table_and_why_not_bounded() -> None:
    reports = [build_pp2_report(leaking=True), build_pp2_report(leaking=False)]
    text = compare_summary([summarize(r) for r in reports], reports, "hicache compare-policies: pp=2")
    assert text.startswith("### hicache compare-policies: pp=2\n")
    assert "| reap | LEAK |" in text and "| drain | BOUNDED |" in text
    why = text[text.index("**Not bounded, and why**") :].splitlines()
    assert why[2].startswith("- reap rank 0: LEAK - work list grows")
    assert not any(line.startswith("- drain") for line in why)


def _lines(block: list[str]) -> list[list[float]]:
    return [json.loads(line.split("line ", 1)[1]) for line in block if line.startswith("    line [")]


def test_compare_summary_draws_rss_and_depth_a_line_per_policy() -> None:
    """After the table and the reasons: RSS and depth, a line per policy in the table's order,
    each the rank the table reads (reap: rank 0, which leaks), coloured as the sentence says."""
    leak, bounded = build_pp2_report(leaking=True), build_pp2_report(leaking=False)
    bounded = replace(bounded, config=replace(bounded.config, target=replace(bounded.config.target, policy="drain")))
    text = compare_summary([summarize(leak), summarize(bounded)], [leak, bounded], "hicache compare-policies")
    rss, depth = _mermaid_blocks(text)
    assert rss[0] == mermaid.INIT and rss[2] == '    title "RSS (MiB)"'
    assert depth[2] == '    title "work-list depth (Works)"'
    growing, flat = _lines(depth)
    assert growing[-1] == 60000 and growing == sorted(growing) and set(flat) == {0}
    climbing, level = _lines(rss)
    assert climbing[-1] > climbing[0] and len(set(level)) == 1
    assert "a line per policy**: reap LEAK (blue), drain BOUNDED (orange)." in text
    assert text.index("**Not bounded, and why**") < text.index("```mermaid")


def test_compare_summary_names_each_colour_up_to_the_palette() -> None:
    """More runs than colours: the first len(COLOURS) are drawn, the rest counted; the palette
    has a colour per line."""
    base = build_pp2_report(leaking=False)
    names = [f"p{i}" for i in range(len(mermaid.COLOURS) + 2)]
    reports = [replace(base, config=replace(base.config, target=replace(base.config.target, policy=n))) for n in names]
    text = compare_summary([summarize(r) for r in reports], reports, "hicache compare-policies")
    rss, _ = _mermaid_blocks(text)
    assert len(_lines(rss)) == len(mermaid.COLOURS)
    assert rss[0] == mermaid.init(len(mermaid.COLOURS)) and rss[0].count("#") == len(mermaid.COLOURS)
    colours = ", ".join(f"p{i} BOUNDED ({word})" for i, (_, word) in enumerate(mermaid.COLOURS))
    assert f"{colours}; 2 more in the bundle." in text


def test_compare_summary_without_series_has_no_charts() -> None:
    report = build_pp2_report(leaking=False)
    bare = replace(report, ranks=[replace(r, series=None) for r in report.ranks])
    assert "```mermaid" not in compare_summary([summarize(bare)], [bare], "hicache compare-policies")


# -- through the commands -------------------------------------------------------------


@pytest.fixture
def summary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """$GITHUB_STEP_SUMMARY as GitHub gives it: a file that may already hold earlier steps'."""
    path = tmp_path / "step_summary.md"
    path.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))
    monkeypatch.chdir(tmp_path)
    return path


def test_check_appends_to_the_step_summary(
    fake_execute: FakeExecute, summary: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--policy", "reap", "--no-live", "--run-dir", str(tmp_path / "run")]) == 1
    text = summary.read_text()
    assert text.startswith("earlier step\n### hicache check FAIL: reap, pp=2 tp=1\n")
    assert "- `bounded`: rank 0 LEAK" in text
    assert f"Report: `{tmp_path / 'run' / 'report.json'}`" in text


def test_compare_policies_appends_to_the_step_summary(fake_execute: FakeExecute, summary: Path, tmp_path: Path) -> None:
    argv = ["compare-policies", "--policies", "reap,drain", "--duration", "10s", "--no-live"]
    assert main([*argv, "--run-dir", str(tmp_path / "c")]) == 0
    text = summary.read_text()
    assert text.startswith("earlier step\n### hicache compare-policies: pp=2 tp=1, 10s, workload mixed\n")
    assert "- reap rank 0: LEAK" in text
    assert len(_mermaid_blocks(text)) == 2 and "reap LEAK (blue), drain BOUNDED (orange)" in text


def test_sglang_scan_appends_to_the_step_summary(
    fake_execute: FakeExecute, summary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two releases: one run (as hicache's model: FakeExecute runs no SGLang), one without
    the PP-sync path; the table, and why the second was not judged."""

    def config(ranks: Ranks, *args: object, **kwargs: object) -> StressConfig:
        if ranks.target.endswith("0.5.11"):
            raise NotApplicable("SGLang 0.5.11 has no PP-sync path")
        return StressConfig(duration_s=10.0)

    monkeypatch.setattr(scan_command, "release_versions", lambda say: ["0.5.11", "0.5.12"])
    monkeypatch.setattr(configure, "ranks_config", config)
    argv = ["sglang-scan", "--versions", "0.5.11,0.5.12", "--duration", "10s", "--no-live"]
    assert main([*argv, "--run-dir", str(tmp_path / "s")]) == 0
    text = summary.read_text()
    assert text.startswith("earlier step\n### hicache sglang-scan: pp=2, 10s per release\n")
    assert "| 0.5.12 |" in text and "LEAK |" in text
    assert "**Not judged, and why**\n\n- 0.5.11: SGLang 0.5.11 has no PP-sync path\n" in text


def test_no_summary_off_github(fake_execute: FakeExecute, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--policy", "reap", "--no-live", "--run-dir", str(tmp_path / "run")]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.parametrize(("make", "kind"), [(Path.mkdir, "a directory"), (os.mkfifo, "a FIFO")])
def test_a_summary_that_cannot_be_written_is_a_warning(
    fake_execute: FakeExecute,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_hang: None,
    make,  # noqa: ANN001
    kind: str,
) -> None:
    """A FIFO was opened for appending: the command blocked after the run until a reader came."""
    path = tmp_path / "summary"
    make(path)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--policy", "reap", "--no-live", "--run-dir", str(tmp_path / "run")]) == 1  # unchanged
    err = capsys.readouterr().err
    assert f"hicache: warning: cannot add to the step summary {path}: {kind}, not a regular file" in err
