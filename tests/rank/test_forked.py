"""rank/forked.py, the fork launcher's own parts: the environment each rank gets and the
failure summary the launcher reads back as it reads torchrun's (its real runs: the stress,
fault and API tests that pass --launcher fork, tests/integration)."""

from __future__ import annotations

import signal
from pathlib import Path

from hicache_cli.config import StressConfig
from hicache_cli.launch.launcher import LaunchConfig, ranks_command, torchrun_command
from hicache_cli.launch.torchrun_log import worker_exits
from hicache_cli.outcome import WorkerExit
from hicache_cli.rank.forked import failure_summary, rank_env


def test_each_rank_gets_what_torchrun_would_give_it() -> None:
    env = rank_env(2, 4, "127.0.0.1", 29400)
    assert env == {"RANK": "2", "LOCAL_RANK": "2", "GROUP_RANK": "0", "ROLE_RANK": "2", "WORLD_SIZE": "4",
                   "LOCAL_WORLD_SIZE": "4", "ROLE_WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": "29400"}  # fmt: skip


def test_the_failure_summary_reads_back_as_torchruns_does() -> None:
    text = failure_summary({1: (-signal.SIGKILL, 4242), 0: (1, 4241), 3: (-signal.SIGTERM, 4244)}, 1, 0.0)
    assert worker_exits(text) == {
        1: WorkerExit(1, -9, "SIGKILL"),
        0: WorkerExit(0, 1, None),
        3: WorkerExit(3, -15, "SIGTERM"),
    }
    assert text.index("Root Cause") < text.index("rank      : 1 (local_rank: 1)")
    assert "Signal 9 (SIGKILL) received by PID 4242" in text
    assert "<NO_OTHER_FAILURES>" in failure_summary({0: (1, 7)}, 0, 0.0)


def test_fork_starts_the_fork_launcher_in_torchruns_place(tmp_path: Path) -> None:
    forked = LaunchConfig(tmp_path, StressConfig(pp=2, tp=2, launcher="fork"))
    command = ranks_command(forked, 29400)
    assert command[1:] == ["-m", "hicache_cli.rank.forked", "--nproc=4", "--master-addr=127.0.0.1",
                           "--master-port=29400", str(tmp_path.resolve())]  # fmt: skip
    spawned = LaunchConfig(tmp_path, StressConfig(pp=2, tp=2))
    assert ranks_command(spawned, 29400) == torchrun_command(spawned, 29400)
