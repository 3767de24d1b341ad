"""config and targets: the run's config round trip for every kind of target, configs written
before targets were typed, the API's type checks, and the stable exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hicache_cli import errors
from hicache_cli.config import RunConfig, StressConfig
from hicache_cli.protocol import CONFIG_FILE
from hicache_cli.records import ShapeError
from hicache_cli.targets import AttachedProcess, ModelTarget, SGLangTarget, TracedCommand

SGLANG = SGLangTarget(
    pp=4,
    version="0.5.14",
    origin="wheel",
    location="sglang==0.5.14 (cached)",
    class_name="HiRadixCache",
    file="/c/sglang/hiradix_cache.py",
    sha256="ab" * 32,
    drain_method="_drain_async_work",
)
TRACED = TracedCommand(command=("torchrun", "--nproc-per-node", "2", "train.py"), loop="train:step", cwd="/srv")
TARGETS = {
    "model": ModelTarget(pp=3, tp=2, policy="drain", request_rate=0.25, faults=("lag:1:5",)),
    "sglang": SGLANG,
    "trace": TRACED,
    "attach": AttachedProcess(pids=(4242, 4250), census=False),
}


@pytest.mark.parametrize("kind", TARGETS)
def test_every_target_round_trips_through_config_json(tmp_path: Path, kind: str) -> None:
    config = RunConfig(target=TARGETS[kind], duration_s=None if kind in ("trace", "attach") else 2.5, warmup_s=0.5)
    config.save(tmp_path)
    written = json.loads((tmp_path / CONFIG_FILE).read_text())
    assert written["target"]["kind"] == kind
    assert RunConfig.load(tmp_path) == config
    assert type(RunConfig.load(tmp_path).target) is type(TARGETS[kind])


def test_each_target_names_its_run() -> None:
    assert [RunConfig(target=t).label for t in TARGETS.values()] == ["drain", "sglang-0.5.14", "trace", "attach"]
    assert RunConfig(target=TARGETS["model"], duration_s=15).title() == "drain  pp=3 tp=2  15s"
    assert RunConfig(target=TRACED, duration_s=None).title() == "trace: torchrun --nproc-per-node 2 train.py"
    assert RunConfig(target=TARGETS["attach"], duration_s=60).title() == "attach: pid 4242, 4250"
    assert [RunConfig(target=t).expected_ranks for t in TARGETS.values()] == [6, 4, None, None]


def test_the_flat_constructor_builds_a_model_run() -> None:
    config = StressConfig(pp=3, tp=2, policy="drain", duration_s=2.5, request_rate=0.25, warmup_s=0.5)
    assert config == RunConfig(
        target=ModelTarget(pp=3, tp=2, policy="drain", request_rate=0.25), duration_s=2.5, warmup_s=0.5
    )


def test_keys_a_newer_hicache_added_are_kept() -> None:
    data = {**StressConfig(pp=4).to_dict(), "written_by_a_newer_version": True}
    assert RunConfig.from_dict(data) == StressConfig(pp=4)
    assert RunConfig.from_dict(data).to_dict()["written_by_a_newer_version"] is True


# Configs as the previous hicache wrote them (flat; the target a word, its details beside it).
FLAT = {
    "pp": 2,
    "tp": 1,
    "policy": "reap",
    "duration_s": 5.0,
    "workload": "mixed",
    "request_rate": None,
    "prefix_sharing": None,
    "idle_fraction": None,
    "seed": 1,
    "probe_hz": 10.0,
    "wait_timeout_s": 5.0,
    "device": "auto",
    "backend": "gloo",
    "pp_backend": "gloo",
    "device_pool_tokens": 4096,
    "host_pool_tokens": 16384,
    "cache_warmup_rounds": 10000,
    "warmup_s": None,
    "leak_threshold_mb_per_h": 100.0,
    "stop_grace_s": 1.5,
    "stall_timeout_s": 5.0,
    "faults": ["kill:1:3"],
    "target": "model",
    "sglang": None,
    "trace": None,
}


def test_a_model_config_of_the_previous_version_reads() -> None:
    config = RunConfig.from_dict(FLAT)
    assert config.target == ModelTarget(pp=2, policy="reap", seed=1, faults=("kill:1:3",))
    assert (config.duration_s, config.stall_timeout_s) == (5.0, 5.0)


def test_an_sglang_config_of_the_previous_version_reads() -> None:
    entry = {
        "version": "0.5.14",
        "origin": "wheel",
        "location": "sglang==0.5.14 (cached)",
        "class": "HiRadixCache",
        "file": "/c/sglang/hiradix_cache.py",
        "sha256": "ab" * 32,
        "tags_file": "",
        "drain_method": "_drain_async_work",
        "unresolved": "",
    }
    flat = {**FLAT, "pp": 4, "target": "sglang", "policy": "sglang-0.5.14", "workload": "idle", "sglang": entry}
    config = RunConfig.from_dict(flat)
    assert config.target == SGLangTarget(**{**vars(SGLANG), "seed": 1, "faults": ("kill:1:3",)})


def test_a_trace_config_of_the_previous_version_reads() -> None:
    trace = {"command": list(TRACED.command), "loop": "train:step", "cwd": "/srv"}
    flat = {**FLAT, "pp": 0, "policy": "trace", "workload": "program", "duration_s": 0.0, "target": "trace"}
    config = RunConfig.from_dict({**flat, "trace": trace})
    assert config.target == TRACED
    assert config.duration_s is None  # 0 meant: until the program exits


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"target": {"kind": "gdb"}}, "target.kind: 'gdb'; expected one of model, sglang, trace, attach, follow"),
        ({"target": {"kind": "model", "pp": "2"}}, "target.pp: a string, expected an integer"),
        ({"target": {"kind": "trace"}}, "target.command: missing"),
        ({**FLAT, "target": "mystery"}, "config.target: 'mystery', expected model, sglang or trace"),
    ],
)
def test_a_wrong_config_is_one_line(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ShapeError) as caught:
        RunConfig.from_dict(data)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"pp": "two"}, "--pp must be a whole number, got 'two'"),
        ({"pp": 2.5}, "--pp must be a whole number, got 2.5"),
        ({"pp": True}, "--pp must be a whole number, got True"),
        ({"tp": 1.0}, "--tp must be a whole number, got 1.0"),
        ({"seed": "x"}, "--seed must be a whole number, got 'x'"),
        ({"policy": 3}, "--policy must be text, got 3"),
        ({"duration_s": "10s"}, "--duration must be a number or None, got '10s'"),
        ({"duration_s": True}, "--duration must be a number or None, got True"),
        ({"warmup_s": "2"}, "--warmup must be a number or None, got '2'"),
        ({"faults": "kill:1:2"}, "--fault must be a list of text, got 'kill:1:2'"),
        ({"round_time_s": -0.001}, "--round-time must be 0 to 10 s, got -0.001"),
        ({"round_time_s": float("nan")}, "--round-time must be 0 to 10 s, got nan"),
    ],
)
def test_validate_checks_types_first_in_the_clis_words(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(errors.UsageError) as caught:
        StressConfig(**settings).validate()
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (AttachedProcess(), "name the process to attach to, e.g. hicache attach 12345"),
        (AttachedProcess(pids=("12",)), "--pid must be a list of whole numbers, got ('12',)"),  # type: ignore[arg-type]
        (AttachedProcess(pids=(12, 0)), "pid 0: a process id is a whole number above 0"),
        (AttachedProcess(pids=(12,), census=1), "--census must be true or false, got 1"),  # type: ignore[arg-type]
    ],
)
def test_an_attach_target_is_checked_in_the_clis_words(target: AttachedProcess, message: str) -> None:
    with pytest.raises(errors.UsageError) as caught:
        RunConfig(target=target, duration_s=None).validate()
    assert str(caught.value) == message


def test_exit_codes() -> None:
    assert (errors.EXIT_OK, errors.EXIT_FINDING, errors.EXIT_USAGE, errors.EXIT_RUN_FAILED) == (0, 1, 2, 3)
    assert errors.EXIT_INTERRUPTED == 130
    assert errors.UsageError("x").exit_code == 2
    assert errors.RunFailed("x").exit_code == 3
    assert isinstance(errors.UsageError("x"), errors.HicacheError)
    assert isinstance(errors.RunFailed("x"), errors.HicacheError)


def test_a_launcher_is_checked_and_read_back() -> None:
    forked = StressConfig(pp=2, launcher="fork").validate()
    assert RunConfig.from_dict(forked.to_dict()) == forked
    earlier = {k: v for k, v in forked.to_dict().items() if k != "launcher"}  # an earlier hicache's config
    assert RunConfig.from_dict(earlier).launcher == "torchrun"
    traced = RunConfig(target=TracedCommand(command=("python", "x.py")), duration_s=None, launcher="fork")
    for bad, words in ((StressConfig(launcher="mpirun"), "--launcher: unknown 'mpirun'; choose from: torchrun, fork"),
                       (traced, "--launcher fork starts hicache's own ranks")):  # fmt: skip
        with pytest.raises(errors.UsageError) as info:
            bad.validate()
        assert str(info.value).startswith(words)
