"""config and errors: the run's config round trip, and the stable exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from hicache_cli import errors
from hicache_cli.config import StressConfig
from hicache_cli.protocol import CONFIG_FILE


def test_config_round_trips_through_the_run_dir(tmp_path: Path) -> None:
    config = StressConfig(pp=3, tp=2, policy="drain", duration_s=2.5, request_rate=0.25, warmup_s=0.5)
    config.save(tmp_path)
    assert json.loads((tmp_path / CONFIG_FILE).read_text())["policy"] == "drain"
    assert StressConfig.load(tmp_path) == config


def test_config_from_dict_ignores_unknown_keys() -> None:
    data = {**StressConfig(pp=4).to_dict(), "written_by_a_newer_version": True}
    assert StressConfig.from_dict(data) == StressConfig(pp=4)


def test_world_size() -> None:
    assert StressConfig(pp=3, tp=4).world_size == 12


def test_exit_codes() -> None:
    assert (errors.EXIT_OK, errors.EXIT_FINDING, errors.EXIT_USAGE, errors.EXIT_RUN_FAILED) == (0, 1, 2, 3)
    assert errors.EXIT_INTERRUPTED == 130
    assert errors.UsageError("x").exit_code == 2
    assert errors.RunFailed("x").exit_code == 3
    assert isinstance(errors.UsageError("x"), errors.HicacheError)
    assert isinstance(errors.RunFailed("x"), errors.HicacheError)
