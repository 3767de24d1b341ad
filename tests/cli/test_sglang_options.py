"""--target sglang glue: cli/options.py and cli/configure.py, report.target_summary, progress.target_line.

The SGLang is a synthetic checkout from tests/sglang_target/families.py; nothing is fetched.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.analysis.report import build_report, target_summary
from hicache_cli.analysis.results import Messages, ModelSection, RankReport, Report, SGLangSection
from hicache_cli.cli.configure import ranks_config
from hicache_cli.config import RunConfig, StressConfig
from hicache_cli.errors import UsageError
from hicache_cli.outcome import RunOutcome
from hicache_cli.present.progress import target_line, verdict_lines
from hicache_cli.sglang_target.extract import NotApplicable, file_sha256
from hicache_cli.sglang_target.locate import TargetError
from hicache_cli.targets import ModelTarget, SGLangTarget
from tests.cli.groups import ranks_options
from tests.conftest import build_pp2_run, report_json
from tests.sglang_target.conftest import FakePip
from tests.sglang_target.families import HIRADIX_REL, NO_PP_SYNC, TAGS_REL, make_checkout, make_wheel

BASE: dict[str, Any] = dict(
    pp=2, tp=1, policy=None, duration="15s", workload="mixed", seed=0, probe_hz=10.0, wait_timeout="5s"
)


def built(opts: dict[str, Any], progress: Any = None) -> RunConfig:
    """The config configure.ranks_config builds from these options, as a command passes them."""
    return ranks_config(**ranks_options(**opts), progress=progress)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return make_checkout(tmp_path / "sglang-checkout")


def sglang_options(checkout: Path, **changes: Any) -> dict[str, Any]:
    return {**BASE, "target": f"sglang:{checkout}", **changes}


def refused(opts: dict[str, Any]) -> str:
    """The one-line message of the UsageError configure.ranks_config raises."""
    with pytest.raises(UsageError) as caught:
        built(opts)
    message = str(caught.value)
    assert "\n" not in message
    assert caught.value.exit_code == 2
    return message


# --- config_from_options -------------------------------------------------------------------------


def test_a_checkout_target_builds_a_config(checkout: Path) -> None:
    config = built(sglang_options(checkout))
    hiradix = checkout / "python" / HIRADIX_REL
    target = config.target
    assert isinstance(target, SGLangTarget)
    assert config.label == "sglang-9.9.9"
    assert target.workload == "idle"  # SGLang's round is driven idle: empty ack queues
    assert {k: v for k, v in target.to_dict().items() if k in ENTRY} == {
        "version": "9.9.9",
        "origin": "path",
        "location": str(checkout),
        "class": "HiRadixCache",
        "file": str(hiradix),
        "sha256": file_sha256(hiradix),
        "tags_file": str(checkout / "python" / TAGS_REL),
        "drain_method": "_reap_completed_async_work",
        "unresolved": "StorageMetrics",  # the synthetic family reads it on its storage path
    }
    assert (target.pp, target.tp, config.duration_s) == (2, 1, 15.0)
    assert RunConfig.from_dict(config.to_dict()) == config  # what the ranks read back


def test_an_explicit_class(checkout: Path) -> None:
    target = built(sglang_options(checkout, sglang_class="UnifiedRadixCache")).target
    assert isinstance(target, SGLangTarget)
    assert target.class_name == "UnifiedRadixCache"
    assert target.drain_method == "_drain_async_work"


def test_a_release_target_reports_its_fetch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HICACHE_CACHE_DIR", str(tmp_path / "cache"))
    pip = FakePip()
    monkeypatch.setattr(subprocess, "run", pip)
    said: list[str] = []
    config = built({**BASE, "target": "sglang==9.9.9"}, said.append)
    assert said == ["fetching the sglang 9.9.9 wheel (no dependencies) ..."]
    assert len(pip.calls) == 1
    assert isinstance(config.target, SGLangTarget)
    assert config.target.origin == "wheel"
    assert config.label == "sglang-9.9.9"


def test_a_cached_release_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HICACHE_CACHE_DIR", str(tmp_path / "cache"))
    make_wheel(tmp_path / "cache" / "wheels" / "sglang-9.9.9-py3-none-any.whl")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("pip was run"))
    target = built({**BASE, "target": "sglang==9.9.9"}).target
    assert isinstance(target, SGLangTarget)
    assert target.class_name == "HiRadixCache"
    assert target.drain_method == "_drain_async_work"


def test_an_allowed_fault(checkout: Path) -> None:
    config = built(sglang_options(checkout, faults=("hang:1:2s", "lag:0:5")))
    assert config.target.faults == ("hang:1:2s", "lag:0:5")


def test_a_model_target_defaults_to_reap() -> None:
    config = built(BASE)
    assert config.target == ModelTarget(policy="reap", workload="mixed")


def test_a_model_target_with_a_policy() -> None:
    assert built({**BASE, "policy": "drain"}).label == "drain"


def test_a_not_applicable_checkout(tmp_path: Path) -> None:
    root = make_checkout(tmp_path, hiradix=NO_PP_SYNC, unified=None)
    with pytest.raises(NotApplicable) as caught:
        built(sglang_options(root))
    assert caught.value.exit_code == 4
    assert "_pp_sync" in str(caught.value)


def test_a_missing_checkout(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="no such file or directory"):
        built(sglang_options(tmp_path / "nowhere"))


# --- refusals ------------------------------------------------------------------------------------


def test_a_policy_with_a_sglang_target(checkout: Path) -> None:
    assert refused(sglang_options(checkout, policy="drain")).startswith("--policy")


@pytest.mark.parametrize(
    ("option", "change"),
    [
        ("request-rate", {"request_rate": 0.5}),
        ("prefix-sharing", {"prefix_sharing": 0.0}),
        ("idle-fraction", {"idle_fraction": 1.0}),
    ],
)
def test_model_workload_options_with_a_sglang_target(checkout: Path, option: str, change: dict[str, float]) -> None:
    message = refused(sglang_options(checkout, **change))
    assert message.startswith(f"--{option} ")
    assert "--target sglang" in message


@pytest.mark.parametrize(
    "change", [{"device": "cuda"}, {"pp_backend": "nccl"}, {"device": "cuda", "pp_backend": "nccl"}]
)
def test_cuda_or_nccl_with_a_sglang_target(checkout: Path, change: dict[str, str]) -> None:
    message = refused(sglang_options(checkout, **change))
    assert "gloo" in message
    assert message.startswith("--target sglang")


@pytest.mark.parametrize("fault", ["raise-in-wait:0:1s", "keep:0:10"])
def test_model_only_faults_with_a_sglang_target(checkout: Path, fault: str) -> None:
    message = refused(sglang_options(checkout, faults=("hang:1:2s", fault)))
    assert message.startswith(f"--fault {fault}:")
    assert "--target sglang" in message


def test_a_bad_sglang_class(checkout: Path) -> None:
    message = refused(sglang_options(checkout, sglang_class="RadixCache"))
    assert message.startswith("--sglang-class: 'RadixCache'")
    assert "auto" in message


def test_a_bad_target() -> None:
    assert refused({**BASE, "target": "vllm"}).startswith("--target")


def test_cheap_checks_come_before_locating(tmp_path: Path) -> None:
    """A bad option is reported without looking for the SGLang (which may mean a download)."""
    message = refused(sglang_options(tmp_path / "nowhere", duration="soon"))
    assert "duration" in message


def test_the_sglang_checks_apply_only_to_a_sglang_target() -> None:
    config = built({**BASE, "policy": "reap", "faults": ("keep:0:10",), "request_rate": 0.5})
    assert config.target.faults == ("keep:0:10",)


# --- report.target_summary ------------------------------------------------------------------------

ENTRY = {
    "version": "9.9.9",
    "origin": "wheel",
    "location": "sglang==9.9.9 (cached in /c/sglang/9.9.9)",
    "class": "HiRadixCache",
    "file": "/c/sglang/9.9.9/sglang/srt/mem_cache/hiradix_cache.py",
    "sha256": "0123456789abcdef" * 4,
    "tags_file": "",
    "drain_method": "_reap_completed_async_work",
    "unresolved": "",
}
SGLANG = RunConfig(target=SGLangTarget.from_dict({"pp": 2, **ENTRY}), duration_s=60.0)


def _rank(rounds: int, sent: int) -> RankReport:
    return RankReport(rank=0, rounds=rounds, messages=Messages(sent=sent), samples=1)


def test_target_summary_of_a_model_run() -> None:
    assert target_summary(StressConfig(policy="drain"), []).to_dict() == {"kind": "model", "policy": "drain"}


def test_target_summary_of_a_sglang_run() -> None:
    ranks = [_rank(rounds=400, sent=800), _rank(rounds=400, sent=0)]
    assert target_summary(SGLANG, ranks).to_dict() == {"kind": "sglang", **ENTRY, "sends_per_round": 2.0}


def test_sends_per_round_is_rounded() -> None:
    ranks = [_rank(rounds=3, sent=1)]
    assert target_summary(SGLANG, ranks).sends_per_round == 0.333


@pytest.mark.parametrize(
    "ranks",
    [
        [],
        [_rank(rounds=0, sent=0)],
        [RankReport(rank=0, samples=0)],  # a rank that wrote no samples
    ],
)
def test_sends_per_round_unknown(ranks: list[RankReport]) -> None:
    summary = target_summary(SGLANG, ranks)
    assert summary.kind == "sglang"
    assert summary.sends_per_round is None


def test_a_sglang_run_in_the_report() -> None:
    report = report_json(SGLANG, build_pp2_run(leaking=True), RunOutcome(wall_s=61.0))
    assert report["target"] == {"kind": "sglang", **ENTRY, "sends_per_round": 1.0}
    assert report["config"]["target"] == SGLANG.target.to_dict()


# --- progress.target_line and verdict_lines ---------------------------------------------------------


def sglang_target(**changes: Any) -> Report:
    return Report(target=SGLangSection.from_dict({"kind": "sglang", **ENTRY, "sends_per_round": 2.0, **changes}))


def test_target_line_of_a_model_run() -> None:
    assert target_line(Report(target=ModelSection(policy="reap"))) is None
    assert target_line(Report(target=None)) is None  # a report from before --target


def test_target_line_names_the_code_and_its_sends() -> None:
    assert target_line(sglang_target()) == (
        "SGLang 9.9.9 HiRadixCache (wheel: sglang==9.9.9 (cached in /c/sglang/9.9.9)): "
        "_reap_completed_async_work reaps completed Works (is_completed poll); "
        "2 PP-sync sends per round; sha256 0123456789ab"
    )


def test_target_line_of_a_draining_release() -> None:
    line = target_line(sglang_target(drain_method="_drain_async_work", sends_per_round=1.5))
    assert line is not None
    assert "_drain_async_work drains every Work (wait()); 1.5 PP-sync sends per round;" in line


def test_target_line_without_sends_or_drain_method() -> None:
    line = target_line(sglang_target(drain_method="", sends_per_round=None))
    assert line is not None
    assert "no known drain method frees Works some other way; sha256" in line
    assert "per round" not in line


def test_verdict_lines_lead_with_the_target() -> None:
    report = build_report(SGLANG, build_pp2_run(leaking=True), RunOutcome(wall_s=61.0))
    lines = verdict_lines(report)
    assert lines[0] == target_line(report)
    assert lines[0].startswith("SGLang 9.9.9 HiRadixCache")
    assert lines[1].startswith("rank 0: LEAK")
    assert lines[2].startswith("rank 1: BOUNDED")
    assert len(lines) == 3


def test_verdict_lines_of_a_model_run_have_no_target_line() -> None:
    report = build_report(StressConfig(pp=2, duration_s=60.0), build_pp2_run(leaking=True), RunOutcome())
    assert verdict_lines(report)[0].startswith("rank 0: LEAK")
