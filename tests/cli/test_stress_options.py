"""commands/stress.py: options -> StressConfig, and every bad option refused in one line."""

from __future__ import annotations

from typing import Any

import pytest

from hicache_cli.cli.configure import ranks_config
from hicache_cli.config import MAX_WORLD_SIZE, RunConfig, StressConfig
from hicache_cli.errors import UsageError
from hicache_model.policies import POLICIES
from hicache_model.workload import PRESETS
from tests.cli.groups import ranks_options

GOOD: dict[str, Any] = dict(
    pp=2, tp=1, policy="reap", duration="15s", workload="mixed", seed=0, probe_hz=10.0, wait_timeout="5s"
)


def options(**changes: Any) -> dict[str, Any]:
    return {**GOOD, **changes}


def built(opts: dict[str, Any], progress: Any = None) -> RunConfig:
    """The config configure.ranks_config builds from these options, as a command passes them."""
    return ranks_config(**ranks_options(**opts), progress=progress)


def test_good_options_build_a_config() -> None:
    config = built(
        options(
            pp=4,
            tp=2,
            policy="bounded-drain",
            duration="2m",
            workload="idle",
            seed=7,
            probe_hz=20.0,
            wait_timeout="250ms",
            request_rate=0.5,
            prefix_sharing=0.0,
            idle_fraction=1.0,
            warmup="30s",
            leak_threshold=50.0,
            round_time="5ms",
        )
    )
    assert config == StressConfig(
        pp=4,
        tp=2,
        policy="bounded-drain",
        duration_s=120.0,
        workload="idle",
        request_rate=0.5,
        prefix_sharing=0.0,
        idle_fraction=1.0,
        seed=7,
        probe_hz=20.0,
        wait_timeout_s=0.25,
        warmup_s=30.0,
        leak_threshold_mb_per_h=50.0,
        round_time_s=0.005,
    )
    assert config.target.world_size == 8


def test_defaults_leave_presets_and_warm_up_to_the_run() -> None:
    config = built(GOOD)
    assert (config.target.request_rate, config.target.prefix_sharing, config.target.idle_fraction, config.warmup_s) == (
        None,
    ) * 4
    assert config.duration_s == 15.0
    assert config.target.wait_timeout_s == 5.0
    assert config.target.round_time_s == 0.0  # rounds as fast as the CPU runs them


@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_registered_policy_is_accepted(policy: str) -> None:
    assert built(options(policy=policy)).label == policy


@pytest.mark.parametrize("workload", list(PRESETS))
def test_every_workload_preset_is_accepted(workload: str) -> None:
    assert built(options(workload=workload)).target.workload == workload


def test_the_largest_world_is_accepted() -> None:
    assert built(options(pp=8, tp=8)).expected_ranks == MAX_WORLD_SIZE


@pytest.mark.parametrize(
    ("changes", "option"),
    [
        ({"pp": 0}, "--pp"),
        ({"pp": -3}, "--pp"),
        ({"tp": -1}, "--tp"),
        ({"tp": 0}, "--tp"),
        ({"pp": 13, "tp": 5}, "--pp"),
        ({"pp": 65}, "--pp"),
        ({"policy": "nope"}, "--policy"),
        ({"policy": "Reap"}, "--policy"),
        ({"workload": "heavy"}, "--workload"),
        ({"request_rate": 1.5}, "--request-rate"),
        ({"request_rate": float("nan")}, "--request-rate"),
        ({"prefix_sharing": -0.1}, "--prefix-sharing"),
        ({"idle_fraction": 2.0}, "--idle-fraction"),
        ({"duration": "abc"}, "--duration"),
        ({"duration": "0"}, "--duration"),
        ({"duration": "-5s"}, "--duration"),
        ({"wait_timeout": "5x"}, "--wait-timeout"),
        ({"round_time": "0s"}, "--round-time"),
        ({"round_time": "fast"}, "--round-time"),
        ({"round_time": "11s"}, "--round-time"),
        ({"warmup": "soon"}, "--warmup"),
        ({"warmup": "15s"}, "--warmup"),
        ({"warmup": "1m", "duration": "30s"}, "--warmup"),
        ({"probe_hz": 0.0}, "--probe-hz"),
        ({"probe_hz": 0.05}, "--probe-hz"),
        ({"probe_hz": 101.0}, "--probe-hz"),
        ({"probe_hz": float("inf")}, "--probe-hz"),
        ({"leak_threshold": 0.0}, "--leak-threshold"),
        ({"leak_threshold": -10.0}, "--leak-threshold"),
        # past the documented maxima (units.MAX_RUN_S, MAX_TIMEOUT_S): every parse_duration user
        ({"duration": "99999999999999999999999999h"}, "--duration"),
        ({"duration": "169h"}, "--duration"),
        ({"warmup": "200h", "duration": "168h"}, "--warmup"),
        ({"wait_timeout": "2h"}, "--wait-timeout"),
        ({"stall_timeout": "61m"}, "--stall-timeout"),
        ({"stall_timeout": "9" * 400}, "--stall-timeout"),
        ({"launcher": "spawn"}, "--launcher"),
        ({"launcher": "Fork"}, "--launcher"),
        ({"launcher": "fork", "nnodes": 2, "rdzv_endpoint": "127.0.0.1:29500"}, "--launcher"),
    ],
)
def test_bad_options_are_refused_in_one_line_naming_the_option(changes: dict[str, Any], option: str) -> None:
    with pytest.raises(UsageError) as info:
        built(options(**changes))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(option)
    assert info.value.exit_code == 2


def test_an_unknown_policy_lists_the_choices() -> None:
    with pytest.raises(UsageError) as info:
        built(options(policy="nope"))
    assert all(name in str(info.value) for name in POLICIES)


def test_a_nan_leak_threshold_is_refused() -> None:
    # Every comparison with nan is false, so every RSS trend would be INCONCLUSIVE.
    with pytest.raises(UsageError, match="^--leak-threshold"):
        built(options(leak_threshold=float("nan")))


def test_the_launcher_is_torchrun_unless_fork_is_asked_for() -> None:
    assert built(GOOD).launcher == "torchrun"
    assert built(options(launcher="fork")) == StressConfig(launcher="fork")
