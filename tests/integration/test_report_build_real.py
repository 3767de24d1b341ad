"""`hicache report build` on a real run's directory: the report the run wrote, rebuilt from
its samples alone, equal but for the fields only the launching hicache knew."""

from __future__ import annotations

import json

import pytest

from hicache_cli.execution import ESTIMATED
from tests.integration.helpers import Run, hicache

pytestmark = pytest.mark.slow

# what the rebuilt report cannot know (null there) or only estimates
LAUNCHER_ONLY = {*ESTIMATED, "launcher_cpu_s", "torchrun_exit_code", "rebuilt"}


def test_report_build_gives_back_the_run_s_report(reap_pp2: Run, tmp_path) -> None:
    out = tmp_path / "rebuilt.json"
    proc = hicache("report", "build", str(reap_pp2.run_dir), "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rebuilt = json.loads(out.read_text())
    written = reap_pp2.report
    assert {k: v for k, v in rebuilt.items() if k not in LAUNCHER_ONLY} == {
        k: v for k, v in written.items() if k not in LAUNCHER_ONLY
    }
    assert rebuilt["launcher_cpu_s"] is None and rebuilt["torchrun_exit_code"] is None
    assert abs(rebuilt["startup_s"] - written["startup_s"]) < 1.0  # config.json is written just before the launch
    assert 0 < rebuilt["wall_s"] <= written["wall_s"]  # to the last sample: the teardown after it is not counted
