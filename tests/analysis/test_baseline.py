"""`check --baseline`: the comparison on synthetic reports with known answers, and the
command through main() on synthetic runs (conftest's FakeExecute: no ranks start)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.analysis.baseline import Tolerance, compare, parse_tolerance, workload_difference
from hicache_cli.analysis.report import build_report
from hicache_cli.analysis.results import RankReport, Report
from hicache_cli.cli.main import main
from hicache_cli.config import StressConfig
from hicache_cli.errors import UsageError
from hicache_cli.outcome import RunOutcome
from hicache_cli.records import replace
from hicache_cli.targets import SGLangTarget, TracedCommand
from tests.conftest import FakeExecute, assert_refused, build_series

DRAIN = StressConfig(pp=2, policy="drain", duration_s=60.0)


def pp2_report(
    config: StressConfig = DRAIN, rss_per_s: float = 0.0, depth: int = 0, latency_s: float = 0.001
) -> Report:
    """Two bounded stages at 10 Hz for 60 s; rank 0's RSS grows `rss_per_s`, its list holds
    `depth` Works at the end (never growing), its rounds take `latency_s`."""
    rank0 = build_series(0, rss_per_s=rss_per_s, rss_noise=30_000, latency_s=lambda t: latency_s, sent_per_s=1000)
    rank0 = [s.__class__(**{**s.as_dict(), "depth": depth if s is rank0[-1] else min(depth, 2)}) for s in rank0]
    rank1 = build_series(1, rss_noise=30_000, noise_seed=2, received_per_s=1000)
    return build_report(config, {0: rank0, 1: rank1}, RunOutcome(wall_s=61.0))


def by_name(results: list[Any]) -> dict[tuple[int | None, str], Any]:
    return {(a.rank, a.name): a for a in results}


# -- tolerances --------------------------------------------------------------------


def test_default_tolerance() -> None:
    assert parse_tolerance([]) == Tolerance(slope_mb_per_h=50.0, depth_factor=1.5, p99_factor=3.0)


def test_tolerances_as_written() -> None:
    allowed = parse_tolerance(["slope=1GB/h", "depth=2x", "p99=1.5"])
    assert allowed == Tolerance(slope_mb_per_h=1000.0, depth_factor=2.0, p99_factor=1.5)


@pytest.mark.parametrize(
    ("specs", "start"),
    [
        (["speed=2x"], "--tolerance 'speed=2x': use slope=RATE"),
        (["p99"], "--tolerance 'p99': use slope=RATE"),
        (["p99=fast"], "--tolerance 'p99=fast': cannot read 'fast' as a factor"),
        (["depth=0.5x"], "--tolerance 'depth=0.5x': a factor must be at least 1"),
        (["p99=2x", "p99=3x"], "--tolerance: p99 is given twice"),
        (["slope=-5MB/h"], "--tolerance slope: cannot read '-5MB/h'"),
    ],
)
def test_bad_tolerances(specs: list[str], start: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_tolerance(specs)
    assert str(caught.value).startswith(start)


# -- the same workload ---------------------------------------------------------------


def test_the_policy_the_target_and_faults_may_differ() -> None:
    base = DRAIN
    model = base.target
    assert workload_difference(base, replace(base, target=replace(model, policy="reap"))) is None
    assert (
        workload_difference(base, replace(base, target=SGLangTarget(pp=2, workload="mixed", version="0.5.14"))) is None
    )
    changed = replace(base, target=replace(model, faults=("lag:1:5",)), duration_s=30.0, probe_hz=20.0)
    assert workload_difference(base, changed) is None


def test_another_workload_is_named() -> None:
    base = DRAIN
    assert workload_difference(base, replace(base, target=replace(base.target, pp=4))) == "pp 2 there, 4 here"
    assert workload_difference(base, replace(base, target=replace(base.target, seed=1, request_rate=0.5))) == (
        "request_rate the preset's there, 0.5 here; seed 0 there, 1 here"
    )
    assert workload_difference(base, replace(base, target=TracedCommand(command=("python",)))) == (
        "the baseline is hicache's workload, this run a trace"
    )


# -- the comparison ---------------------------------------------------------------------


def test_a_rerun_of_the_baseline_passes() -> None:
    results = compare(pp2_report(), pp2_report(), "base.json", Tolerance())
    assert {(a.rank, a.name) for a in results} == {
        (r, n) for r in (0, 1) for n in ("baseline-slope", "baseline-depth", "baseline-p99")
    }
    assert all(a.passed is True for a in results)
    assert "baseline base.json's" in by_name(results)[(0, "baseline-slope")].message


def test_a_steeper_rss_slope_fails_naming_the_baseline_and_the_figure() -> None:
    steeper = pp2_report(rss_per_s=50_000.0)  # +180 MB/h: under the absolute 200 MB/h, far above the baseline
    slope = by_name(compare(steeper, pp2_report(), "base.json", Tolerance()))[(0, "baseline-slope")]
    assert slope.passed is False
    assert slope.message.startswith("rank 0 RSS slope +180 MB/h [95% ")
    assert "is above baseline base.json's " in slope.message and "(+50 MB/h allowed) by 129 MB/h" in slope.message
    loose = by_name(compare(steeper, pp2_report(), "base.json", Tolerance(slope_mb_per_h=500.0)))
    assert loose[(0, "baseline-slope")].passed is True


def test_a_deeper_work_list_fails() -> None:
    deeper = by_name(compare(pp2_report(depth=4), pp2_report(depth=2), "b.json", Tolerance()))[(0, "baseline-depth")]
    assert deeper.passed is False
    assert deeper.message == "rank 0 work list peaked at 4; baseline b.json's at 2 (at most 3 allowed)"
    same = by_name(compare(pp2_report(depth=3), pp2_report(depth=2), "b.json", Tolerance()))[(0, "baseline-depth")]
    assert same.passed is True


def test_a_slower_loop_fails_by_its_factor() -> None:
    base = pp2_report(latency_s=0.002)
    slow = by_name(compare(pp2_report(latency_s=0.010), base, "b.json", Tolerance()))[(0, "baseline-p99")]
    assert slow.passed is False
    assert slow.message.startswith("rank 0 loop p99 ")
    assert "baseline b.json's" in slow.message and "allowed: x3 + 1 ms" in slow.message
    noise = by_name(compare(pp2_report(latency_s=0.004), base, "b.json", Tolerance()))[(0, "baseline-p99")]
    assert noise.passed is True  # twice as slow: within x3


def test_a_rank_the_baseline_lacks_is_undecided() -> None:
    base = pp2_report()
    silent = RankReport(rank=1, pp_rank=1, tp_rank=0, verdict=base.ranks[1].verdict, verdict_reason="", samples=0)
    base = replace(base, ranks=[base.ranks[0], silent])
    lacking = by_name(compare(pp2_report(), base, "b.json", Tolerance()))[(1, "baseline")]
    assert lacking.passed is None and "baseline b.json has no samples of it" in lacking.message


def test_other_devices_are_undecided() -> None:
    report, base = pp2_report(), pp2_report()
    report = replace(report, environment=replace(report.environment, devices=["cpu"]))
    base = replace(base, environment=replace(base.environment, devices=["NVIDIA H200"]))
    device = by_name(compare(report, base, "b.json", Tolerance()))[(None, "baseline")]
    assert device.passed is None and device.message == "the ranks ran on cpu, baseline b.json's on NVIDIA H200"


# -- through the command --------------------------------------------------------------


@pytest.fixture(autouse=True)
def in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)


def check(tmp_path: Path, *options: str) -> int:
    return main(["check", "--run-dir", str(tmp_path / "run"), "--no-live", "--duration", "60s", *options])


def baseline_of(tmp_path: Path, fake: FakeExecute, *options: str) -> Path:
    """A baseline made as a user makes one: a check run's report."""
    assert check(tmp_path, "--policy", "drain", "--report", str(tmp_path / "base.json"), *options) == 0
    fake.calls.clear()  # the runs a test makes are its own
    shutil.rmtree(tmp_path / "run")
    return tmp_path / "base.json"


def test_a_rerun_passes_and_the_document_names_the_baseline(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = baseline_of(tmp_path, fake_execute)
    capsys.readouterr()
    assert check(tmp_path, "--policy", "batched", "--baseline", str(base), "--json") == 0  # another policy: fine
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["baseline"] == {
        "report": str(base),
        "tolerance": {"slope_mb_per_h": 50.0, "depth_factor": 1.5, "p99_factor": 3.0},
    }
    names = {a["name"] for a in doc["assertions"]}
    assert {"baseline-slope", "baseline-depth", "baseline-p99"} <= names
    assert "PASS  baseline-depth" in captured.err


def test_worse_than_the_baseline_fails(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = baseline_of(tmp_path, fake_execute)
    report = json.loads(base.read_text())
    # the stored run's rank 0 shed memory steadily; this run's holds flat: worse by 40+ MB/h
    report["ranks"][0]["rss"] |= {"slope_mb_per_h": -95.0, "slope_ci95_mb_per_h": [-100.0, -90.0]}
    base.write_text(json.dumps(report))
    capsys.readouterr()
    assert check(tmp_path, "--policy", "drain", "--baseline", str(base)) == 1
    out = capsys.readouterr().out
    fails = [line.strip() for line in out.splitlines() if line.strip().startswith("FAIL")]
    assert len(fails) == 1
    assert fails[0].startswith("FAIL  baseline-slope rank 0 RSS slope ")
    assert f"is above baseline {base}'s -95 MB/h [95% -100, -90] (+50 MB/h allowed) by " in fails[0]
    assert "hicache check FAIL" in out


@pytest.mark.parametrize(
    ("options", "start"),
    [
        (["--pp", "4"], "--baseline BASE: another workload (pp 2 there, 4 here); only the policy and the code"),
        (["--seed", "7"], "--baseline BASE: another workload (seed 0 there, 7 here)"),
        (["--workload", "idle"], "--baseline BASE: another workload (workload mixed there, idle here)"),
    ],
)
def test_another_workload_is_refused_before_running(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], start: str
) -> None:
    base = baseline_of(tmp_path, fake_execute)
    work = tmp_path / "work"
    work.mkdir()
    argv = ["check", "--baseline", str(base), "--run-dir", str(work / "run"), *options]
    assert_refused(argv, start.replace("BASE", str(base)), capsys, fake_execute, work)


def test_a_failed_baseline_is_refused(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = baseline_of(tmp_path, fake_execute)
    report = json.loads(base.read_text())
    base.write_text(json.dumps({**report, "status": "failed"}))
    work = tmp_path / "work"
    work.mkdir()
    argv = ["check", "--baseline", str(base), "--run-dir", str(work / "run")]
    assert_refused(argv, f"--baseline {base}: that run failed; a baseline must be", capsys, fake_execute, work)


def test_a_missing_baseline_and_a_lone_tolerance_are_refused(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_refused(["check", "--baseline", "nope.json"], "nope.json: no such report", capsys, fake_execute, tmp_path)
    assert_refused(
        ["check", "--tolerance", "p99=2x"], "--tolerance applies to --baseline", capsys, fake_execute, tmp_path
    )
