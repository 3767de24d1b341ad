"""Across nodes: torchrun's command and environment, which ranks a node may signal, what
execute hands back on each node, and how a lost node reads in the report."""

from __future__ import annotations

import dataclasses
import io
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hicache_cli import execution, stacks
from hicache_cli.config import StressConfig
from hicache_cli.launch import launcher, supervisor
from hicache_cli.launch.launcher import (
    LOOPBACK,
    LaunchConfig,
    LinkEnd,
    TorchrunRanks,
    on_node,
    rank_environment,
    torchrun_command,
)
from hicache_cli.launch.nodes import NodeSpec
from hicache_cli.outcome import RunOutcome, WorkerExit
from hicache_cli.protocol import NODE_ENV, REPORT_FILE, TORCHRUN_LOG, ErrorKind, stacks_file
from hicache_cli.protocol import samples_file as rank_file
from hicache_cli.rank.probe import LoopStats, Probe, RankIdentity, Readings
from hicache_cli.sample import Sample
from hicache_cli.watchdog import Stall
from tests.conftest import build_sample, build_series, report_json

PP4 = StressConfig(pp=4)
NODE0 = NodeSpec(
    nnodes=2,
    node_rank=0,
    nproc_per_node=2,
    rdzv_host="10.0.0.1",
    rdzv_port=29500,
    rdzv_id="run-7",
    sample_port=29501,
)
NODE1 = dataclasses.replace(NODE0, node_rank=1)


def launch_config(tmp_path: Path, nodes: NodeSpec | None = None) -> LaunchConfig:
    return LaunchConfig(run_dir=tmp_path, config=PP4, nodes=nodes)


def on(node: int, series: list[Sample], host: str | None = None) -> list[Sample]:
    """The series as a rank on `node` writes it."""
    return [dataclasses.replace(s, node=node, host=host or f"node{node}") for s in series]


# --- torchrun's command ------------------------------------------------------------------


def test_one_machine_uses_the_master_address(tmp_path: Path) -> None:
    assert torchrun_command(launch_config(tmp_path), 29400) == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        "--nproc-per-node=4",
        f"--master-addr={LOOPBACK}",
        "--master-port=29400",
        "--max-restarts=0",
        "--monitor-interval=0.2",
        "-m",
        "hicache_cli.rank.entry",
        str(tmp_path),
    ]


@pytest.mark.parametrize("nodes", [NODE0, NODE1], ids=["node0", "node1"])
def test_across_nodes_torchrun_meets_at_the_c10d_rendezvous(tmp_path: Path, nodes: NodeSpec) -> None:
    assert torchrun_command(launch_config(tmp_path, nodes), 12345) == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        f"--node-rank={nodes.node_rank}",
        "--nproc-per-node=2",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=10.0.0.1:29500",
        "--rdzv-id=run-7",
        "--max-restarts=0",
        "--monitor-interval=0.2",
        "-m",
        "hicache_cli.rank.entry",
        str(tmp_path),
    ]


def test_across_nodes_there_is_no_master_address_or_picked_port(tmp_path: Path) -> None:
    command = torchrun_command(launch_config(tmp_path, NODE1), 12345)
    assert not [arg for arg in command if arg.startswith("--master-")]
    assert not [arg for arg in command if "12345" in arg]


# --- the ranks' environment ----------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.delenv(NODE_ENV, raising=False)


@pytest.mark.usefixtures("clean_env")
def test_one_machine_on_loopback() -> None:
    env = rank_environment(LOOPBACK)
    assert env["GLOO_SOCKET_IFNAME"] == "lo"
    assert env[NODE_ENV] == "0"


@pytest.mark.usefixtures("clean_env")
def test_one_machine_elsewhere_leaves_gloo_to_choose() -> None:
    env = rank_environment("10.0.0.1")
    assert "GLOO_SOCKET_IFNAME" not in env
    assert env[NODE_ENV] == "0"


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("localhost", True), ("10.0.0.1", False)])
@pytest.mark.parametrize("node_rank", [0, 1])
def test_across_nodes_the_rendezvous_host_decides_loopback(host: str, loopback: bool, node_rank: int) -> None:
    nodes = dataclasses.replace(NODE0, rdzv_host=host, node_rank=node_rank)
    env = rank_environment(LOOPBACK, nodes)  # the launcher's own host is loopback; the nodes' is not
    assert ("GLOO_SOCKET_IFNAME" in env) is loopback
    if loopback:
        assert env["GLOO_SOCKET_IFNAME"] == "lo"
    assert env[NODE_ENV] == str(node_rank)


# --- what a node expects and may signal ----------------------------------------------------


def test_expected_ranks_and_node_rank(tmp_path: Path) -> None:
    one, head, other = launch_config(tmp_path), launch_config(tmp_path, NODE0), launch_config(tmp_path, NODE1)
    assert (one.expected_ranks, one.node_rank) == (4, 0)
    assert (head.expected_ranks, head.node_rank) == (4, 0)  # node 0 sees every rank's samples
    assert (other.expected_ranks, other.node_rank) == (2, 1)  # another node sees its own


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    calls: list[tuple[int, int]] = []

    def kill(pid: int, signo: int) -> None:
        calls.append((pid, signo))
        if pid == 9999:
            raise ProcessLookupError(pid)

    monkeypatch.setattr(launcher.os, "kill", kill)
    monkeypatch.setattr(supervisor.os, "kill", kill)
    return calls


def two_node_samples() -> dict[int, list[Sample]]:
    """Ranks 0, 1 on node 0 and 2, 3 on node 1 (pids 1000 + rank), and rank 4 not started."""
    samples = {r: [build_sample(r, 0.1, node=r // 2), build_sample(r, 0.2, node=r // 2)] for r in range(4)}
    samples[4] = []
    return samples


def ranks_on(tmp_path: Path, nodes: NodeSpec | None) -> TorchrunRanks:
    return TorchrunRanks(launch_config(tmp_path, nodes))


@pytest.mark.parametrize(("nodes", "pids"), [(NODE0, [1000, 1001]), (NODE1, [1002, 1003])])
def test_an_early_stop_signals_only_this_nodes_ranks(
    tmp_path: Path, kills: list[tuple[int, int]], nodes: NodeSpec, pids: list[int]
) -> None:
    ranks = ranks_on(tmp_path, nodes)
    assert ranks.stop_early(two_node_samples(), "LEAK settled", 0.0) is None  # the ranks end the run
    assert kills == [(pid, signal.SIGUSR2) for pid in pids]


def test_on_one_machine_an_early_stop_signals_node_0s_ranks(tmp_path: Path, kills: list[tuple[int, int]]) -> None:
    ranks_on(tmp_path, None).stop_early(two_node_samples(), "LEAK settled", 0.0)
    assert [pid for pid, _ in kills] == [1000, 1001]


def test_an_early_stop_goes_by_the_first_sample_and_survives_a_gone_rank(
    tmp_path: Path, kills: list[tuple[int, int]]
) -> None:
    samples = {
        0: [build_sample(0, 0.1, pid=9999), build_sample(0, 0.2, pid=9999)],  # already gone
        1: [build_sample(1, 0.1, node=1), build_sample(1, 0.2, node=0)],
    }
    ranks_on(tmp_path, None).stop_early(samples, "LEAK settled", 0.0)
    assert kills == [(9999, signal.SIGUSR2), (1001, signal.SIGUSR2)]


def test_on_node() -> None:
    samples = two_node_samples()
    assert on_node(samples, 0, 0)
    assert not on_node(samples, 2, 0)
    assert on_node(samples, 2, 1)
    assert not on_node(samples, 4, 0)  # no samples: not known to be here
    assert not on_node(samples, 7, 0)  # no such rank


def test_stacks_are_requested_only_from_this_nodes_ranks(
    tmp_path: Path, kills: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watchdog's stalls: the stacks asked only of the ranks here (by SIGUSR1: these pids
    answer no FIFO), and the run stopped for all."""
    monkeypatch.setattr(stacks, "WAIT_S", 0.0)
    samples = two_node_samples()
    stalls = [Stall(rank=r, pid=1000 + r, kind="hang", since_t=0.2, message=f"rank {r} hung") for r in (1, 2)]
    monkeypatch.setattr(supervisor, "find_stalls", lambda *args: stalls)
    watchdog = ranks_on(tmp_path, NODE1).watchdog
    assert watchdog is not None
    for rank in (1, 2):
        stacks_file(watchdog.run_dir, rank).write_text("")  # armed: its faulthandler writes there
    stop = watchdog.check(samples)
    assert kills == [(1002, signal.SIGUSR1)]
    assert stop is not None and stop.stalls == tuple(stalls) and stop.reason.startswith("watchdog: rank 1 hung")


# --- execute on each node ----------------------------------------------------------------


def fake_follow(outcome: RunOutcome, samples: dict[int, list[Sample]], seen: list[LaunchConfig]) -> Any:
    """Stands in for the supervisor's follow: the ranks' lines are written, and `outcome` returned."""

    def follow(strategy: Any, view: Any = None, early_stop: Any = None, poll_s: float = 0.5) -> RunOutcome:
        seen.append(strategy.config)
        for rank, series in samples.items():
            rank_file(strategy.config.run_dir, rank).write_text("".join(s.to_json() + "\n" for s in series))
        return outcome

    return follow


def test_another_node_writes_no_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[LaunchConfig] = []
    outcome = RunOutcome(exit_code=0, wall_s=12.0, link_error="lost the link to node 0: Broken pipe")
    samples = {r: on(1, build_series(r, n=20)) for r in (2, 3)}
    monkeypatch.setattr(execution, "follow", fake_follow(outcome, samples, seen))

    got = execution.execute(PP4, tmp_path, lambda s, t: None, nodes=NODE1)
    assert got == execution.RunResult(tmp_path, None, None, outcome)
    assert not (tmp_path / REPORT_FILE).exists()
    assert seen[0].nodes == NODE1


def test_node_0_reports_with_the_other_nodes_exits_and_losses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    samples = {
        0: on(0, build_series(0, n=30)),
        1: on(0, build_series(1, n=30)),
        2: on(1, build_series(2, n=20, final=False)),  # node 1 was lost
        3: on(1, build_series(3, n=20, final=False)),
    }
    outcome = RunOutcome(
        exit_code=0,
        wall_s=12.0,
        lost_nodes={1: "node 1 (node1) lost: no word from its hicache for 5.5 s"},
        worker_exits={3: WorkerExit(3, -9, "SIGKILL")},
    )
    monkeypatch.setattr(execution, "follow", fake_follow(outcome, samples, []))

    got = execution.execute(PP4, tmp_path, lambda s, t: None, nodes=NODE0)
    assert got.report is not None
    assert got.report_path == tmp_path / REPORT_FILE
    assert got.outcome is not None and got.outcome.lost_nodes == outcome.lost_nodes
    failures = {f["rank"]: f for f in got.report.to_dict()["failures"]}
    assert sorted(failures) == [2, 3]
    assert failures[2]["message"] == "node 1 (node1) lost: no word from its hicache for 5.5 s; last sample at 2.0 s"
    assert (failures[3]["exit_code"], failures[3]["signal"]) == (-9, "SIGKILL")  # node 1's torchrun said so
    assert json.loads((tmp_path / REPORT_FILE).read_text())["failures"] == got.report.to_dict()["failures"]


TORCHRUN_FAILURE = """\
Failures:
[1]:
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 1797)
"""


def test_node_0s_outcome_takes_the_other_nodes_exits_beside_its_own_torchruns(tmp_path: Path) -> None:
    """Node 0's torchrun names its own failed ranks; the others' come over the link."""
    (tmp_path / TORCHRUN_LOG).write_text(TORCHRUN_FAILURE)
    ranks = ranks_on(tmp_path, NODE0)
    ranks.link_end = LinkEnd(lost_nodes={1: "node 1 lost"}, remote_exits={3: (-9, "SIGKILL"), 1: (7, None)})
    outcome = ranks.outcome(None)
    assert outcome.worker_exits == {1: WorkerExit(1, -15, "SIGTERM"), 3: WorkerExit(3, -9, "SIGKILL")}
    assert outcome.lost_nodes == {1: "node 1 lost"}


# --- the report of a run that lost a node ----------------------------------------------------


LOST = "node 1 (h) lost: no word from its hicache for 6.0 s"


def lost_node_run() -> dict[int, list[Sample]]:
    """pp=4 over two nodes: node 1 (ranks 2, 3, host h) went silent at 5.0 / 5.2 s; node 0's
    ranks then lost their connection to it at 6 s and ended with an error line."""
    broken = {
        "final_state": "error",
        "message": "Connection closed by peer [10.0.0.2]:41234",
        "error": (ErrorKind.CONNECTION, None),
    }
    return {
        0: on(0, build_series(0, n=60, **broken)),
        1: on(0, build_series(1, n=61, **broken)),
        2: on(1, build_series(2, n=50, final=False), host="h"),
        3: on(1, build_series(3, n=52, final=False), host="h"),
    }


def test_a_lost_nodes_ranks_crash_with_its_message() -> None:
    report = report_json(PP4, lost_node_run(), RunOutcome(wall_s=8.0, lost_nodes={1: LOST}))
    assert report["status"] == "failed"
    failures = {f["rank"]: f for f in report["failures"]}
    assert failures[2]["kind"] == failures[3]["kind"] == "crash"
    assert failures[2]["message"] == f"{LOST}; last sample at 5.0 s"
    assert failures[3]["message"] == f"{LOST}; last sample at 5.2 s"
    assert report["root_cause"] in (2, 3)
    assert report["root_cause"] == 2  # the earlier of the two


def test_a_lost_nodes_ranks_that_the_watchdog_saw_go_silent_are_its_loss_not_hangs() -> None:
    """Node 0's watchdog calls a rank hung after 3 s without samples, the link a node lost
    after 5 s: when node 0's own ranks end slowly (a loaded machine) the watchdog speaks first."""
    hangs = tuple(Stall(r, 100 + r, "hang", f"rank {r} stopped sampling 3.1 s ago", 5.0) for r in (2, 3))
    outcome = RunOutcome(wall_s=8.0, stopped="watchdog: ...", stalls=hangs, lost_nodes={1: LOST})
    failures = {f["rank"]: f for f in report_json(PP4, lost_node_run(), outcome)["failures"]}
    assert failures[2]["kind"] == failures[3]["kind"] == "crash"
    assert failures[2]["message"] == f"{LOST}; last sample at 5.0 s"
    without_the_loss = dataclasses.replace(outcome, lost_nodes={})
    failures = {f["rank"]: f for f in report_json(PP4, lost_node_run(), without_the_loss)["failures"]}
    assert failures[2]["kind"] == "hang"  # a node still heard from: its silent rank hangs


def test_node_0s_connection_errors_are_consequences_of_the_lost_node() -> None:
    report = report_json(PP4, lost_node_run(), RunOutcome(wall_s=8.0, lost_nodes={1: LOST}))
    failures = {f["rank"]: f for f in report["failures"]}
    for rank in (0, 1):
        assert failures[rank]["kind"] == "error"
        assert failures[rank]["consequence_of"] == 2
    assert [f["rank"] for f in report["failures"]] == [2, 3, 0, 1]  # causes first, then consequences


def test_without_the_loss_the_same_ranks_are_plain_crashes() -> None:
    report = report_json(PP4, lost_node_run(), RunOutcome(wall_s=8.0))
    failures = {f["rank"]: f for f in report["failures"]}
    assert failures[2]["message"] == "the rank ended without its final line (see its log)"


def test_a_lost_node_does_not_touch_another_nodes_ranks() -> None:
    samples = lost_node_run()
    samples[0] = on(0, build_series(0, n=60, final=False))
    report = report_json(PP4, samples, RunOutcome(wall_s=8.0, lost_nodes={1: LOST}))
    failures = {f["rank"]: f for f in report["failures"]}
    assert failures[0]["message"] == "the rank ended without its final line (see its log)"


def test_a_lost_nodes_ranks_with_a_final_line_did_not_crash() -> None:
    samples = lost_node_run()
    samples[2] = on(1, build_series(2, n=50), host="h")
    samples[3] = on(1, build_series(3, n=52), host="h")
    report = report_json(PP4, samples, RunOutcome(wall_s=8.0, lost_nodes={1: LOST}))
    assert 2 not in {f["rank"] for f in report["failures"]}


def test_an_interrupted_run_lists_no_lost_ranks() -> None:
    report = report_json(PP4, lost_node_run(), RunOutcome(interrupted=True, wall_s=8.0, lost_nodes={1: LOST}))
    assert report["status"] == "interrupted"
    assert {f["rank"] for f in report["failures"]} == {0, 1}  # their error lines, not a loss


def test_a_node_that_never_reached_node_0_is_named_in_the_report() -> None:
    samples = {r: on(0, build_series(r, n=30)) for r in (0, 1)}
    never = "never reached node 0 (its hicache did not connect to the sample store)"
    report = report_json(PP4, samples, RunOutcome(wall_s=8.0, lost_nodes={1: never}))
    failures = {f["rank"]: f for f in report["failures"]}
    assert sorted(failures) == [2, 3]
    assert all(never in failures[r]["message"] for r in (2, 3))


def test_rank_summaries_carry_host_and_node() -> None:
    report = report_json(PP4, lost_node_run(), RunOutcome(wall_s=8.0, lost_nodes={1: LOST}))
    where = {r["rank"]: (r["host"], r["node"]) for r in report["ranks"]}
    assert where == {0: ("node0", 0), 1: ("node0", 0), 2: ("h", 1), 3: ("h", 1)}


def test_one_machine_samples_read_as_node_0_without_a_host() -> None:
    """Lines written before ranks carried node and host (or by a rank that could not tell)."""
    line = json.loads(build_sample(0, 0.1).to_json())
    del line["node"], line["host"]
    sample = Sample.from_dict(line)
    assert (sample.node, sample.host) == (0, None)


# --- the rank's side: its node and host in every line ----------------------------------------


def test_the_probe_writes_the_ranks_node_and_host() -> None:
    now = time.monotonic()
    out = io.StringIO()
    probe = Probe(
        RankIdentity(rank=2, pp_rank=2, tp_rank=0, node=1, host="node1.cluster"),
        LoopStats(),
        lambda: Readings(depth=0, held_bytes=0, sent=0, received=0),
        out,
        hz=10.0,
        started=now - 1.0,
        deadline=now + 60.0,
        stop_grace_s=1.5,
    )
    sample = probe.sample()
    assert (sample.node, sample.host) == (1, "node1.cluster")
    probe.finish("done", "reached the deadline")
    final = Sample.from_dict(json.loads(out.getvalue().splitlines()[-1]))
    assert (final.kind, final.node, final.host) == ("final", 1, "node1.cluster")


def test_a_probe_without_a_node_is_node_0() -> None:
    ident = RankIdentity(rank=0, pp_rank=0, tp_rank=0)
    assert (ident.node, ident.host) == (0, None)
