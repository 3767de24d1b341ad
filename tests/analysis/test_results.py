"""The typed report (analysis/results.py): read from the JSON the report builder writes,
typed where the schema says, and given back unchanged."""

from __future__ import annotations

import json
from typing import Any

import pytest

import hicache_cli as hc
from hicache_cli.analysis.report import build_report
from hicache_cli.analysis.results import LoopLatency, Report, Rss, WorkList
from hicache_cli.config import StressConfig
from hicache_cli.outcome import RunOutcome
from tests.conftest import build_pp2_run


def written(report: Report) -> dict[str, Any]:
    return json.loads(json.dumps(report.to_dict()))  # as a reader finds it


@pytest.fixture(scope="module")
def leak() -> dict[str, Any]:
    return written(build_report(StressConfig(pp=2, duration_s=60.0), build_pp2_run(), RunOutcome()))


def test_fields_are_typed_and_the_json_comes_back_unchanged(leak: dict[str, Any]) -> None:
    report = Report.read(leak)
    assert report.to_dict() == leak
    assert report.to_dict() is not leak  # a copy: the record cannot be changed through it
    rank0 = report.ranks[0]
    assert isinstance(rank0.rss, Rss) and isinstance(rank0.work_list, WorkList)
    assert isinstance(rank0.loop_latency, LoopLatency)  # from "loop_latency_ms"
    assert rank0.work_list.max == leak["ranks"][0]["work_list"]["max"]
    assert rank0.rss.slope_ci95_mb_per_h == leak["ranks"][0]["rss"]["slope_ci95_mb_per_h"]
    assert report.config == StressConfig(pp=2, duration_s=60.0)
    assert report.target.kind == "model" and report.target.policy == "reap"


def test_verdicts_and_statuses_are_enums_equal_to_their_strings(leak: dict[str, Any]) -> None:
    report = Report.read(leak)
    assert report.verdict is hc.Verdict.LEAK and report.verdict == "LEAK"
    assert report.status is hc.Status.COMPLETED and report.status == "completed"
    assert f"{report.verdict} {report.status}" == "LEAK completed" and str(report.verdict) == "LEAK"
    assert json.dumps({"v": report.verdict}) == '{"v": "LEAK"}'


def test_keys_and_values_a_newer_hicache_adds_survive(leak: dict[str, Any]) -> None:
    newer = {**leak, "verdict": "SUSPECT", "added_later": {"x": 1}}
    newer["ranks"] = [{**leak["ranks"][0], "new_key": [1, 2]}, *leak["ranks"][1:]]
    report = Report.read(newer)
    assert report.verdict == "SUSPECT" and not isinstance(report.verdict, hc.Verdict)
    assert report.to_dict() == newer


def test_a_rank_that_wrote_nothing_has_nothing_measured() -> None:
    data = written(build_report(StressConfig(pp=2, duration_s=60.0), {0: build_pp2_run()[0]}, RunOutcome()))
    silent = Report.read(data).rank(1)
    assert silent.samples == 0 and silent.verdict == hc.Verdict.INCONCLUSIVE
    assert silent.rss is None and silent.work_list is None and silent.loop_latency is None
    with pytest.raises(KeyError):
        Report.read(data).rank(7)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (StressConfig(pp=0), "--pp must be at least 1, got 0"),
        (StressConfig(pp=16, tp=8), "--pp x --tp = 128 ranks; at most 64 are supported"),
        (StressConfig(policy="nope"), "--policy: unknown policy 'nope'"),
        (StressConfig(probe_hz=1000), "--probe-hz must be between 0.1 and 100, got 1000"),
        (StressConfig(duration_s=-1), "--duration: must be more than zero"),
        (StressConfig(duration_s=float("inf")), "--duration: must be more than zero and at most 7 days"),
        (StressConfig(duration_s=10, warmup_s=20), "--warmup (20s) must be shorter than --duration (10s)"),
        (StressConfig(faults=("kill:9:1s",)), "--fault:"),
    ],
)
def test_the_config_checks_itself_with_the_clis_messages(config: StressConfig, message: str) -> None:
    with pytest.raises(hc.UsageError, match=None) as caught:
        config.validate()
    assert str(caught.value).startswith(message)


def test_the_package_exports_load_on_first_use() -> None:
    assert set(hc.__all__) <= set(dir(hc))
    with pytest.raises(AttributeError):
        _ = hc.no_such_name
