"""plot: PNGs of one report or several; unwritable outputs and a missing matplotlib are UsageErrors."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.analysis.report import write_report
from hicache_cli.analysis.results import RankReport
from hicache_cli.cli.main import main
from hicache_cli.errors import UsageError
from hicache_cli.present.plot import plot_reports
from hicache_cli.records import replace

MakeReport = Callable[..., dict[str, Any]]
PNG = b"\x89PNG\r\n\x1a\n"


def is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[: len(PNG)] == PNG


def test_one_report(tmp_path: Path, make_pp2_report: MakeReport) -> None:
    out = tmp_path / "one.png"
    assert plot_reports([("reap", make_pp2_report())], out) == out
    assert is_png(out)


def test_two_reports(tmp_path: Path, make_pp2_report: MakeReport) -> None:
    out = tmp_path / "two.png"
    reports = [("reap", make_pp2_report()), ("drain", make_pp2_report(leaking=False))]
    assert plot_reports(reports, out) == out
    assert is_png(out)


def test_ranks_without_samples_or_readings_are_left_out(tmp_path: Path, make_pp2_report: MakeReport) -> None:
    report = make_pp2_report()
    silent = RankReport(rank=1, pp_rank=1, tp_rank=0, samples=0)
    series = report.ranks[0].series
    gaps = replace(series, rss_bytes=[None] * len(series.rss_bytes))  # RSS could not be read
    report = replace(report, ranks=[replace(report.ranks[0], series=gaps), silent])
    out = tmp_path / "gaps.png"
    plot_reports([("reap", report)], out)
    assert is_png(out)


def test_an_unwritable_output(tmp_path: Path, make_pp2_report: MakeReport) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    out = blocker / "plot.png"
    with pytest.raises(UsageError) as caught:
        plot_reports([("reap", make_pp2_report())], out)
    assert str(out) in str(caught.value)
    assert str(caught.value).startswith("cannot write ")


def test_without_matplotlib(tmp_path: Path, make_pp2_report: MakeReport, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the plot extra were not installed
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    out = tmp_path / "plot.png"
    with pytest.raises(UsageError, match=r"hicache\[plot\]"):
        plot_reports([("reap", make_pp2_report())], out)
    assert not out.exists()


def test_an_output_of_an_unknown_format(tmp_path: Path, make_pp2_report: MakeReport) -> None:
    with pytest.raises(UsageError):
        plot_reports([("reap", make_pp2_report())], tmp_path / "plot.txt")


def test_an_output_without_a_suffix_is_a_png_under_the_name_given(tmp_path: Path, make_pp2_report: MakeReport) -> None:
    """Was written as plot.png: a name other than the one asked for."""
    written = plot_reports([("reap", make_pp2_report())], tmp_path / "plot")
    assert written == tmp_path / "plot" and is_png(written)
    assert [p.name for p in tmp_path.iterdir()] == ["plot"]


# -- the command ---------------------------------------------------------------------


@pytest.fixture
def saved(tmp_path: Path, make_pp2_report: MakeReport) -> list[Path]:
    paths = []
    for name, leaking in (("reap", True), ("drain", False)):
        (tmp_path / name).mkdir()
        paths.append(write_report(make_pp2_report(leaking=leaking), tmp_path / name))
    return paths


def test_report_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path, saved: list[Path]) -> None:
    out = tmp_path / "out.png"
    assert main(["report", "plot", str(saved[0]), "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    assert is_png(out)


def test_report_plot_of_two_run_directories(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, saved: list[Path]
) -> None:
    out = tmp_path / "both.png"
    assert main(["report", "plot", str(saved[0].parent), str(saved[1].parent), "--output", str(out)]) == 0
    assert is_png(out)


def test_report_plot_into_a_missing_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, saved: list[Path]
) -> None:
    out = tmp_path / "missing" / "out.png"
    assert main(["report", "plot", str(saved[0]), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [err.rstrip("\n")]
    assert err.startswith(f"hicache: error: --output {out}: directory {out.parent} does not exist")


def test_report_plot_onto_a_fifo_is_refused_before_reading(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, saved: list[Path]
) -> None:
    fifo = tmp_path / "plot.png"
    os.mkfifo(fifo)
    assert main(["report", "plot", str(saved[0]), "-o", str(fifo)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hicache: error: --output {fifo}: a FIFO, not a regular file")
    assert len(err.splitlines()) == 1
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_report_plot_onto_a_device_without_a_suffix_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, saved: list[Path]
) -> None:
    """Was: `-o /dev/full` wrote /dev/full.png (a suffix added, then the new name written)."""
    device = tmp_path / "full"
    device.symlink_to("/dev/full")
    assert main(["report", "plot", str(saved[0]), "-o", str(device)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"hicache: error: --output {device}: a character device, not a regular file "
                                "(hicache writes files whole, by replacing them)"]  # fmt: skip
    assert not os.path.lexists(tmp_path / "full.png")


def test_report_plot_to_an_unknown_format(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, saved: list[Path]
) -> None:
    assert main(["report", "plot", str(saved[0]), "-o", str(tmp_path / "plot.txt")]) == 2
    assert capsys.readouterr().err.startswith("hicache: error: ")
