"""commands/stress.py: --fault and --stall-timeout into StressConfig, bad ones refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.cli.configure import ranks_config
from hicache_cli.config import RunConfig, StressConfig
from hicache_cli.errors import UsageError
from hicache_cli.protocol import CONFIG_FILE
from tests.cli.groups import ranks_options

GOOD: dict[str, Any] = dict(
    pp=2, tp=1, policy="drain", duration="15s", workload="mixed", seed=0, probe_hz=10.0, wait_timeout="5s"
)
FAULTS = ("lag:1:5", "stall:1:4s:2s", "hang:0:1.5s", "kill:1:4s", "raise-in-wait:0:3s")


def options(**changes: Any) -> dict[str, Any]:
    return {**GOOD, **changes}


def built(opts: dict[str, Any], progress: Any = None) -> RunConfig:
    """The config configure.ranks_config builds from these options, as a command passes them."""
    return ranks_config(**ranks_options(**opts), progress=progress)


def test_without_faults_the_config_has_none_and_a_5s_stall_timeout() -> None:
    config = built(GOOD)
    assert config.target.faults == ()
    assert config.stall_timeout_s == 5.0


def test_good_faults_and_stall_timeout_end_up_in_the_config() -> None:
    config = built(options(faults=FAULTS, stall_timeout="500ms"))
    assert config.target.faults == FAULTS
    assert config.stall_timeout_s == 0.5


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("boom:1:4s", "unknown kind 'boom'"),
        ("kill:1", "expected kill:RANK:AT"),
        ("kill:x:4s", "rank 'x' is not a number"),
        ("kill:1:soon", "cannot read 'soon' as a time"),
        ("kill:3:4s", "there is no rank 3 (ranks are 0-1)"),
    ],
)
def test_a_bad_fault_is_a_usage_error_naming_the_option_and_the_spec(spec: str, says: str) -> None:
    with pytest.raises(UsageError) as info:
        built(options(faults=("lag:1:5", spec)))
    message = str(info.value)
    assert message.startswith(f"--fault: fault {spec!r}: ")
    assert says in message
    assert "\n" not in message


def test_fault_ranks_count_every_rank_of_pp_times_tp() -> None:
    with pytest.raises(UsageError, match="there is no rank 3"):
        built(options(pp=2, tp=1, faults=("kill:3:4s",)))
    assert built(options(pp=2, tp=2, faults=("kill:3:4s",))).target.faults == ("kill:3:4s",)


def test_a_rank_that_only_looks_like_a_digit_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--fault"):
        built(options(faults=("kill:²:4s",)))


@pytest.mark.parametrize("text", ["soon", "0s", "-1s", "5 minutes", ""])
def test_a_bad_stall_timeout_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError) as info:
        built(options(stall_timeout=text))
    assert str(info.value).startswith("--stall-timeout: ")


def test_faults_survive_save_and_load(tmp_path: Path) -> None:
    config = built(options(faults=FAULTS, stall_timeout="2s"))
    config.save(tmp_path)
    assert json.loads((tmp_path / CONFIG_FILE).read_text())["target"]["faults"] == list(FAULTS)
    loaded = RunConfig.load(tmp_path)
    assert loaded == config
    assert loaded.target.faults == FAULTS  # a tuple again, so the frozen config stays hashable
    assert hash(loaded) == hash(config)


def test_to_dict_gives_the_faults_as_a_list() -> None:
    data = StressConfig(faults=FAULTS).to_dict()["target"]
    assert data["faults"] == list(FAULTS)
    assert isinstance(data["faults"], list)
    assert StressConfig(faults=()).to_dict()["target"]["faults"] == []
