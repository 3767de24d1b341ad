"""`hicache report build RUN_DIR`: the report rebuilt from a run directory's samples, on
recorded run directories (tests/data/under_load) and bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hicache_cli.analysis.kinds import Verdict
from hicache_cli.analysis.report import load_report
from hicache_cli.cli.main import main
from hicache_cli.execution import ESTIMATED, UNKNOWN, rebuild_report

RECORDED = Path(__file__).resolve().parents[1] / "data" / "under_load"


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A recorded reap run's directory, as hicache left it when killed: no report."""
    return Path(shutil.copytree(RECORDED / "reap-b", tmp_path / "run"))


def test_a_run_without_its_report_gets_one(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "build", str(run_dir)]) == 0
    report = load_report(run_dir / "report.json")  # a report its readers accept
    assert report.verdict is Verdict.LEAK
    assert report.ranks[0].verdict is Verdict.LEAK is not report.ranks[1].verdict
    assert report.ranks[0].verdict_reason.startswith("work list only grows")
    assert report.rebuilt is not None
    assert report.rebuilt.estimated == list(ESTIMATED)
    assert report.rebuilt.unknown == list(UNKNOWN)
    assert report.torchrun_exit_code is None and report.launcher_cpu_s is None
    out = capsys.readouterr().out
    assert "rank 0: LEAK - work list only grows" in out
    assert f"wrote {run_dir / 'report.json'}" in out


def test_output_goes_where_asked_and_is_the_library_s_report(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "again.json"
    assert main(["report", "build", str(run_dir), "-o", str(out)]) == 0
    written = json.loads(out.read_text())
    expected = rebuild_report(run_dir).to_dict()
    for report in (written, expected):
        report.pop("rebuilt")
    assert written == expected
    assert not (run_dir / "report.json").exists()


def test_a_run_s_own_report_is_never_replaced_unasked(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (run_dir / "report.json").write_text("{}")
    assert main(["report", "build", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "already has its report.json; name another file with --output" in err
    assert (run_dir / "report.json").read_text() == "{}"


def not_a_run(tmp_path: Path, kind: str) -> Path:
    """A directory `report build` must refuse: missing, without config.json, with a broken
    one, or with a config and no samples."""
    path = tmp_path / kind
    if kind != "missing":
        path.mkdir()
    if kind in ("bad-config", "no-samples"):
        (path / "config.json").write_text("[1" if kind == "bad-config" else "{}")
    return path


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("missing", "no such run directory"),
        ("no-config", "not a run directory (no config.json)"),
        ("bad-config", "not a hicache run's config"),
        ("no-samples", "no samples to build a report from"),
    ],
)
def test_what_is_not_a_run_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, message: str
) -> None:
    assert main(["report", "build", str(not_a_run(tmp_path, kind)), "-o", str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_live_report_has_no_rebuilt_key_and_an_old_report_reads_without_the_new_keys(run_dir: Path) -> None:
    """`rebuilt` is only in a rebuilt report; a report of an older hicache (no by_peer, cause,
    shutdown or rebuilt) still reads."""
    data = rebuild_report(run_dir).to_dict()
    assert "rebuilt" in data
    data.pop("rebuilt")
    for rank in data["ranks"]:
        rank.pop("cause")
        rank["messages"].pop("by_peer")
    path = run_dir / "old.json"
    path.write_text(json.dumps(data))
    old = load_report(path)
    assert old.rebuilt is None and old.ranks[0].cause is None and old.ranks[0].messages.by_peer == []
    assert "rebuilt" not in old.to_dict()
