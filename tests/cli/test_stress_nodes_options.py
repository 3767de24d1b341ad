"""`hicache stress` across nodes, through the real CLI: the node options become a NodeSpec,
bad ones are refused in one line, and a node other than node 0 ends with its own summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hicache_cli.cli import running as run_commands
from hicache_cli.cli.main import main
from hicache_cli.config import StressConfig
from hicache_cli.execution import RunResult
from hicache_cli.launch.nodes import NodeSpec
from hicache_cli.outcome import RunOutcome
from hicache_cli.protocol import samples_file as rank_file
from tests.conftest import FakeExecute, assert_refused, build_sample, free_port

NODE_OPTIONS = ["--pp", "4", "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:29500"]


@pytest.fixture(autouse=True)
def in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Any default run directory lands in tmp_path."""
    monkeypatch.chdir(tmp_path)


def stress(tmp_path: Path, *options: str) -> int:
    return main(["stress", "--run-dir", str(tmp_path / "run"), "--no-live", "--duration", "2s", *options])


# --- options -> NodeSpec -------------------------------------------------------------------


def test_node_options_reach_execute_as_a_node_spec(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stress(tmp_path, *NODE_OPTIONS, "--node-rank", "0")
    (call,) = fake_execute.calls
    assert call["nodes"] == NodeSpec(
        nnodes=2,
        node_rank=0,
        nproc_per_node=2,
        rdzv_host="127.0.0.1",
        rdzv_port=29500,
        rdzv_id="hicache",
        sample_port=29501,
    )
    assert call["config"].target.world_size == 4
    out = capsys.readouterr().out
    assert "node 0 of 2, 2 ranks here, rendezvous 127.0.0.1:29500, samples to node 0 on port 29501" in out


def test_every_node_option_is_taken(fake_execute: FakeExecute, tmp_path: Path) -> None:
    stress(
        tmp_path,
        "--pp",
        "4",
        "--tp",
        "2",
        "--nnodes",
        "4",
        "--node-rank",
        "0",
        "--nproc-per-node",
        "2",
        "--rdzv-endpoint",
        "node0.cluster:1234",
        "--rdzv-id",
        "run-7",
        "--sample-port",
        "4000",
        "--run-secret",
        "0123456789abcdef",
    )
    (call,) = fake_execute.calls
    assert call["nodes"] == NodeSpec(4, 0, 2, "node0.cluster", 1234, "run-7", 4000, "0123456789abcdef")


def test_the_run_secret_comes_from_the_environment_too(
    fake_execute: FakeExecute, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HICACHE_RUN_SECRET", "from-the-environment")
    stress(tmp_path, "--pp", "4", "--nnodes", "2", "--rdzv-endpoint", "10.0.0.1:29500", "--node-rank", "1")
    (call,) = fake_execute.calls
    assert call["nodes"].run_secret == "from-the-environment"
    assert "from-the-environment" not in capsys.readouterr().out


def test_across_machines_a_run_without_a_secret_is_refused(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HICACHE_RUN_SECRET", raising=False)
    options = ["--pp", "4", "--nnodes", "2", "--rdzv-endpoint", "10.0.0.1:29500", "--node-rank", "0"]
    assert_refused(
        ["stress", *options], "--run-secret (or HICACHE_RUN_SECRET) is needed", capsys, fake_execute, tmp_path
    )


def test_node_0_writes_the_report(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stress(tmp_path, "--pp", "2", "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:29500", "--node-rank", "0")
    assert (tmp_path / "run" / "report.json").is_file()
    assert f"report: {tmp_path / 'run' / 'report.json'}" in capsys.readouterr().out


def test_without_nnodes_there_is_no_node_spec(fake_execute: FakeExecute, tmp_path: Path) -> None:
    assert stress(tmp_path, "--policy", "drain") == 0
    (call,) = fake_execute.calls
    assert call["nodes"] is None


def test_nnodes_1_is_one_machine(fake_execute: FakeExecute, tmp_path: Path) -> None:
    assert stress(tmp_path, "--policy", "drain", "--nnodes", "1") == 0
    assert fake_execute.calls[0]["nodes"] is None


@pytest.mark.parametrize(
    ("options", "start"),
    [
        (["--node-rank", "0"], "--node-rank is for runs across nodes; give --nnodes too"),
        (["--nproc-per-node", "2"], "--nproc-per-node is for runs across nodes"),
        (["--rdzv-endpoint", "127.0.0.1:29500"], "--rdzv-endpoint is for runs across nodes"),
        (["--sample-port", "29501"], "--sample-port is for runs across nodes"),
        (["--nnodes", "0"], "--nnodes must be at least 1"),
        ([*NODE_OPTIONS], "--node-rank: give this node's index, 0 to 1"),
        ([*NODE_OPTIONS, "--node-rank", "2"], "--node-rank: give this node's index, 0 to 1"),
        ([*NODE_OPTIONS, "--node-rank", "-1"], "--node-rank: give this node's index, 0 to 1"),
        (["--pp", "4", "--nnodes", "2", "--node-rank", "0"], "--rdzv-endpoint HOST:PORT is needed with --nnodes"),
        (["--pp", "4", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "node0"], "--rdzv-endpoint: 'node0'"),
        (["--pp", "4", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "h:99999"], "--rdzv-endpoint: 'h:9"),
        ([*NODE_OPTIONS, "--node-rank", "0", "--nproc-per-node", "3"], "--nproc-per-node 3 x --nnodes 2 must equal"),
        (["--pp", "3", *NODE_OPTIONS[2:], "--node-rank", "0"], "--nproc-per-node 1 x --nnodes 2 must equal"),
        ([*NODE_OPTIONS, "--node-rank", "0", "--sample-port", "29500"], "--sample-port: 29500 must be a TCP port"),
        ([*NODE_OPTIONS, "--node-rank", "0", "--rdzv-id", "a/b"], "--rdzv-id: 'a/b'"),
    ],
)
def test_bad_node_options_are_refused_in_one_line(
    fake_execute: FakeExecute,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    options: list[str],
    start: str,
) -> None:
    assert_refused(["stress", *options], start, capsys, fake_execute, tmp_path)


def test_port_with_nnodes_is_refused(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = [*NODE_OPTIONS, "--node-rank", "0", "--port", str(free_port())]
    assert_refused(["stress", *options], "--port is for one machine", capsys, fake_execute, tmp_path)


def test_a_report_copy_on_another_node_is_refused(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = [*NODE_OPTIONS, "--node-rank", "1", "--report", str(tmp_path / "report.json")]
    assert_refused(["stress", *options], "--report: node 0 writes the report", capsys, fake_execute, tmp_path)


# --- another node's end ----------------------------------------------------------------------


class NodeExecute:
    """Stands in for run.execute on a node other than node 0: its two ranks (2 and 3) wrote
    their lines into the run directory, and there is no report, only the launch's result."""

    def __init__(self, launched: RunOutcome) -> None:
        self.launched = launched
        self.calls: list[dict[str, Any]] = []

    def __call__(self, config: StressConfig, run_dir: Path, on_tick: Any, *args: Any, **kwargs: Any) -> RunResult:
        self.calls.append({"config": config, "run_dir": run_dir, **kwargs})
        for rank in (2, 3):
            rank_file(run_dir, rank).write_text(build_sample(rank, 0.1, node=1).to_json() + "\n")
        return RunResult(run_dir, None, None, self.launched)


def run_node_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, launched: RunOutcome) -> tuple[int, NodeExecute]:
    fake = NodeExecute(launched)
    monkeypatch.setattr(run_commands, "execute", fake)
    return stress(tmp_path, *NODE_OPTIONS, "--node-rank", "1"), fake


def test_another_node_ends_with_its_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, fake = run_node_1(tmp_path, monkeypatch, RunOutcome(exit_code=0, wall_s=3.0))
    out = capsys.readouterr().out
    assert code == 0
    assert fake.calls[0]["nodes"].node_rank == 1
    assert f"node 1: ranks 2, 3 ran here; their samples and logs are in {tmp_path / 'run'}" in out
    assert "node 1: the report is written on node 0" in out
    assert "report:" not in out
    assert not (tmp_path / "run" / "report.json").exists()


def test_another_node_says_when_its_link_to_node_0_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    launched = RunOutcome(exit_code=0, wall_s=3.0, link_error="lost the link to node 0: Broken pipe")
    assert run_node_1(tmp_path, monkeypatch, launched)[0] == 0
    out = capsys.readouterr().out
    assert "node 1: lost the link to node 0: Broken pipe; node 0's report lacks what followed" in out
    assert "the report is written on node 0" not in out


@pytest.mark.parametrize(
    ("launched", "code", "said"),
    [
        (RunOutcome(exit_code=1, wall_s=3.0), 3, "node 1: torchrun exited with 1"),
        (
            RunOutcome(exit_code=None, stopped="node 0 ended the run: watchdog: rank 0 hung", wall_s=3.0),
            3,
            "node 1: node 0 ended the run: watchdog: rank 0 hung",
        ),
        (RunOutcome(exit_code=None, interrupted=True, stopped="interrupted by the user", wall_s=3.0), 130, None),
    ],
    ids=["torchrun-failed", "stopped-by-node-0", "interrupted"],
)
def test_another_nodes_exit_code(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    launched: RunOutcome,
    code: int,
    said: str | None,
) -> None:
    assert run_node_1(tmp_path, monkeypatch, launched)[0] == code
    out = capsys.readouterr().out
    if said is not None:
        assert said in out


def test_the_dashboard_is_node_0s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal node 0 shows the live dashboard; the other nodes print plain lines."""
    lives: dict[int, bool] = {}

    def run_with_progress(
        config: StressConfig, directory: Path, console: Any, live: bool, *args: Any, **kw: Any
    ) -> RunResult:
        nodes = kw["nodes"]
        lives[nodes.node_rank] = live
        return RunResult(directory, None, None, RunOutcome(0, False, False, None, 1.0))

    monkeypatch.setattr(run_commands, "wants_live", lambda no_live, json_output=False: True)
    monkeypatch.setattr(run_commands, "run_with_progress", run_with_progress)
    for node in ("0", "1"):
        main(["stress", "--run-dir", str(tmp_path / f"run{node}"), *NODE_OPTIONS, "--node-rank", node])
    assert lives == {0: True, 1: False}
