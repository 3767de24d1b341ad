"""Report.from_dict, the one reader: a report read back must have the documented shape; a wrong
one is one line naming the field (and `report show/diff/plot` exit 2), never a traceback."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.analysis.report import load_report
from hicache_cli.analysis.results import Report as TypedReport
from hicache_cli.cli.main import main
from hicache_cli.errors import UsageError
from hicache_cli.records import ShapeError

Report = dict[str, Any]


@pytest.fixture
def report(make_pp2_report: Callable[..., Report]) -> Report:
    """A real report as it reads back from JSON."""
    return json.loads(json.dumps(make_pp2_report().to_dict()))


def broken(report: Report, change: Callable[[Report], None]) -> Report:
    bad = copy.deepcopy(report)
    change(bad)
    return bad


def _set(path: str, value: Any) -> Callable[[Report], None]:
    """Set report[a][b]... (integers index lists) to value."""

    def change(report: Report) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        node: Any = report
        for key in parents:
            node = node[key]
        node[last] = value

    return change


def _drop(path: str) -> Callable[[Report], None]:
    def change(report: Report) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        node: Any = report
        for key in parents:
            node = node[key]
        del node[last]

    return change


# (change, the message check_report gives)
BROKEN = {
    "ranks a string": (_set("ranks", "x"), "ranks: a string, expected a list"),
    "rss empty": (_set("ranks.0.rss", {}), "ranks[0].rss.end_bytes: missing"),
    "rss a list": (_set("ranks.1.rss", []), "ranks[1].rss: a list, expected an object or null"),
    "rss null": (_set("ranks.1.rss", None), "ranks[1].rss: null, expected an object"),
    "slope a string": (
        _set("ranks.0.rss.slope_mb_per_h", "fast"),
        "ranks[0].rss.slope_mb_per_h: a string, expected a number or null",
    ),
    "interval of one": (
        _set("ranks.0.rss.slope_ci95_mb_per_h", [1.0]),
        "ranks[0].rss.slope_ci95_mb_per_h: 1 items, expected 2",
    ),
    "interval without a slope": (
        _set("ranks.0.rss.slope_mb_per_h", None),
        "ranks[0].rss.slope_mb_per_h: null beside an interval",
    ),
    "depth a float": (_set("ranks.0.work_list.max", 1.5), "ranks[0].work_list.max: a number, expected an integer"),
    "depth a boolean": (
        _set("ranks.0.work_list.final", True),
        "ranks[0].work_list.final: a boolean, expected an integer",
    ),
    "no latency": (_drop("ranks.1.loop_latency_ms"), "ranks[1].loop_latency_ms: missing"),
    "no backlog key": (
        _drop("ranks.1.backlog_at_stop.unreceived_messages"),
        "ranks[1].backlog_at_stop.unreceived_messages: missing",
    ),
    "no rank number": (_drop("ranks.0.rank"), "ranks[0].rank: missing"),
    "a rank a number": (_set("ranks.0", 7), "ranks[0]: an integer, expected an object"),
    "samples a string": (_set("ranks.0.samples", "many"), "ranks[0].samples: a string, expected an integer"),
    "series short": (_set("ranks.0.series.depth", [0]), "ranks[0].series: t, rss_bytes and depth differ in length"),
    "series t a string": (_set("ranks.0.series.t", "x"), "ranks[0].series.t: a string, expected a list"),
    "config null": (_set("config", None), "config: null, expected an object"),
    "pp a string": (_set("config.target.pp", "2"), "config.target.pp: a string, expected an integer"),
    "an unknown target": (
        _set("config.target.kind", "x"),
        "config.target.kind: 'x'; expected one of model, sglang, trace, attach, follow",
    ),
    "environment a list": (_set("environment", []), "environment: a list, expected an object"),
    "failures an object": (_set("failures", {}), "failures: an object, expected a list"),
    "a failure without a kind": (_set("failures", [{"rank": 0, "message": "x"}]), "failures[0].kind: missing"),
    "status a number": (_set("status", 3), "status: an integer, expected a string"),
    "wall a string": (_set("wall_s", "long"), "wall_s: a string, expected a number or null"),
    "counters a string": (_set("ranks.0.counters", "x"), "ranks[0].counters: a string, expected an object or null"),
    "a site's line a string": (
        _set("ranks.0.memory_kinds", {"readings": "many"}),
        "ranks[0].memory_kinds.readings: a string, expected an integer",
    ),
    "verdict a list": (_set("ranks.0.verdict", []), "ranks[0].verdict: a list, expected a string"),
    "target a string": (_set("target", "sglang"), "target: a string, expected an object or null"),
    "an sglang target without a hash": (
        _set("target", {"kind": "sglang", "version": "1", "class": "C", "origin": "path", "location": "x"}),
        "target.sha256: missing",
    ),
}


@pytest.mark.parametrize("name", BROKEN)
def test_a_wrong_shape_names_the_field(report: Report, name: str) -> None:
    change, message = BROKEN[name]
    with pytest.raises(ShapeError) as info:
        TypedReport.from_dict(broken(report, change))
    assert str(info.value) == message


def test_a_real_report_passes_and_comes_back_unchanged(report: Report) -> None:
    assert TypedReport.from_dict(report).to_dict() == report


def test_keys_readers_do_not_need_may_be_missing(report: Report) -> None:
    """Keys are added within a schema version: a report of an older hicache lacks some."""
    for key in ("target", "wall_s", "pp_consistency", "startup_s", "root_cause"):
        report.pop(key, None)
    report["ranks"][0].pop("series")
    report["ranks"][0].pop("counters")
    report["ranks"][1]["rss"]["slope_ci95_mb_per_h"] = None
    report["new_key"] = {"from": "a newer hicache"}
    read = TypedReport.from_dict(report)
    assert read.ranks[0].series is None and read.target is None
    assert read.to_dict()["new_key"] == {"from": "a newer hicache"}


def test_a_rank_that_wrote_nothing_needs_only_its_identity(report: Report) -> None:
    report["ranks"][1] = {
        "rank": 1,
        "pp_rank": 1,
        "tp_rank": 0,
        "verdict": "INCONCLUSIVE",
        "verdict_reason": "the rank wrote no samples",
        "samples": 0,
    }
    assert TypedReport.from_dict(report).ranks[1].rss is None


def test_load_report_refuses_a_wrong_shape_in_one_line(report: Report, tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(broken(report, _set("ranks", "x"))), encoding="utf-8")
    with pytest.raises(UsageError) as info:
        load_report(path)
    assert str(info.value) == f"{path}: not a valid hicache report: ranks: a string, expected a list"
    assert info.value.exit_code == 2


@pytest.mark.parametrize("name", ["ranks a string", "rss empty", "no latency", "series t a string", "config null"])
@pytest.mark.parametrize("command", ["show", "diff", "plot"])
def test_report_commands_refuse_a_wrong_shape(
    report: Report, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, command: str
) -> None:
    """Each was a traceback and exit 1 before the schema was checked on load."""
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(report), encoding="utf-8")
    change, message = BROKEN[name]
    bad.write_text(json.dumps(broken(report, change)), encoding="utf-8")
    argv = {
        "show": ["report", "show", str(bad)],
        "diff": ["report", "diff", str(good), str(bad)],
        "plot": ["report", "plot", str(good), str(bad), "-o", str(tmp_path / "p.png")],
    }[command]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err == f"hicache: error: {bad}: not a valid hicache report: {message}\n"
    assert "Traceback" not in captured.out
    assert not (tmp_path / "p.png").exists()
