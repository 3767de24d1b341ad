"""Names that come from a program or a report file (a class, an attribute, a function, a
process name, a reason) are shown, never obeyed by the terminal: an escape sequence that
retitles the window or clears the screen, and the bidirectional overrides that reorder
what is read, come out written as their escapes (docs/security.md)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from hicache_cli.attached import AttachedPid, HolderCount
from hicache_cli.cli.main import main
from hicache_cli.present.progress import RunConsole, inert, summary_table
from hicache_cli.present.trace_views import attached_lines
from tests.analysis.test_attach_report import attach_report

HOSTILE = "evil\x1b]0;owned\x07\x1b[2J\u202egnirts\x9b"
TRACE_RUN = Path(__file__).resolve().parents[1] / "data" / "trace-run"


def acted_on(text: str) -> list[str]:
    """Characters in `text` a terminal would act on (the console here adds no style codes)."""
    return [c for c in text if c in "\x1b\x07\x9b\u202e"]


def test_inert_escapes_what_a_terminal_acts_on_and_keeps_the_rest() -> None:
    assert inert("Scheduler.sync_works\tok\n") == "Scheduler.sync_works\tok\n"
    assert inert("a\x1b[2Jb\u202ec") == "a\\x1b[2Jb\\u202ec"
    assert inert("naïve 名前") == "naïve 名前"  # letters are not controls


def test_an_attached_process_s_hostile_names_reach_the_terminal_inert() -> None:
    holder = HolderCount(path=f"{HOSTILE}.pending", container=HOSTILE, works=3, completed=0)
    process = AttachedPid(pid=7, name=HOSTILE, rank=0, state="attached", method="gdb", inject_s=0.1, census_s=0.1,
                          works=3, holders=[holder], reason=HOSTILE)  # fmt: skip
    out = io.StringIO()
    console = RunConsole(file=out, width=100, force_terminal=True, color_system=None, markup=False, highlight=False)
    for line in attached_lines(process, end=True):
        console.print(line)
    console.print(summary_table(attach_report(), 100))
    assert acted_on(out.getvalue()) == []
    assert "\\x1b]0;owned" in out.getvalue() and "\\u202egnirts" in out.getvalue()


def test_report_show_prints_a_report_s_hostile_strings_inert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = json.loads((TRACE_RUN / "report.json").read_text())
    report["ranks"][0]["verdict_reason"] = HOSTILE
    report["ranks"][0]["host"] = HOSTILE
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    assert main(["report", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert HOSTILE not in out and acted_on(out) == [] and "\\u202egnirts" in out


def test_an_error_naming_a_hostile_file_is_one_inert_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / f"run{HOSTILE}"
    shutil.copytree(TRACE_RUN, run)
    (run / "rank-0.jsonl").unlink()
    (run / "rank-0.jsonl").mkdir()  # not a file: refused, naming the path
    assert main(["report", "build", str(run), "--output", str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and acted_on(err) == []
