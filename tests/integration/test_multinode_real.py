"""Two `hicache stress` processes on this machine acting as two nodes: torchrun's c10d
rendezvous on loopback, pp 4 spread 2 + 2 (or pp 2, 1 + 1), samples gathered on node 0;
a node that refuses to start, and an outsider to the run's link."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from hicache_cli.launch.node_messages import BAD_LINES
from hicache_cli.launch.node_wire import NOT_THE_PROTOCOL, REFUSED_PROOF, UNPROVEN
from tests.integration.helpers import PACED, REPO
from tests.outsider import forge, send_raw

pytestmark = pytest.mark.slow


def _two_free_ports() -> int:
    """A port p with p + 1 also free: the rendezvous and node 0's sample store."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            if port >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no two consecutive free ports")


def _node(tmp: Path, node: int, port: int, *args: str, pp: int = 4) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "hicache_cli", "stress", "--no-live", "--pp", str(pp), "--nnodes", "2", *PACED]
    cmd += ["--node-rank", str(node), "--rdzv-endpoint", f"127.0.0.1:{port}", "--run-dir", str(tmp / f"node{node}")]
    return subprocess.Popen(
        [*cmd, *args],
        cwd=tmp,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_two_nodes_make_one_report_with_every_rank(tmp_path: Path) -> None:
    port = _two_free_ports()
    head = _node(tmp_path, 0, port, "--policy", "reap", "--duration", "5s")
    other = _node(tmp_path, 1, port, "--policy", "reap", "--duration", "5s")
    other_out, _ = other.communicate(timeout=150)
    head_out, _ = head.communicate(timeout=150)

    assert head.returncode == 0, head_out
    assert other.returncode == 0, other_out
    report = json.loads((tmp_path / "node0" / "report.json").read_text())
    assert report["status"] == "completed"
    ranks = report["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert sorted(r["node"] for r in ranks) == [0, 0, 1, 1]  # torchrun picks which ranks go where
    assert all(r["host"] == socket.gethostname() for r in ranks)
    assert all(r["samples"] > 20 for r in ranks)
    # a reap run leaks; which stage the 6 s window can call LEAK depends on the load: a stage whose
    # sends back up behind a slower one stops growing its list for a while (INCONCLUSIVE), never
    # BOUNDED while it holds thousands of unreaped Works
    assert "LEAK" in {r["verdict"] for r in ranks}, [r["verdict_reason"] for r in ranks]
    assert ranks[0]["verdict"] in ("LEAK", "INCONCLUSIVE"), ranks[0]["verdict_reason"]
    assert ranks[0]["work_list"]["final"] > 100
    # node 0's view followed all four ranks while they ran
    assert all(f"r{rank} " in head_out for rank in range(4))
    # node 1 keeps its own ranks' samples, complete, and writes no report
    node1_ranks = sorted(r["rank"] for r in ranks if r["node"] == 1)
    assert sorted(p.name for p in (tmp_path / "node1").glob("rank-*.jsonl")) == [f"rank-{r}.jsonl" for r in node1_ranks]
    assert not (tmp_path / "node1" / "report.json").exists()
    assert "the report is written on node 0" in other_out
    for rank in node1_ranks:
        local = (tmp_path / "node1" / f"rank-{rank}.jsonl").read_text().splitlines()
        gathered = (tmp_path / "node0" / f"rank-{rank}.jsonl").read_text().splitlines()
        assert [json.loads(line) for line in gathered] == [json.loads(line) for line in local]


def test_a_node_that_dies_is_reported_as_lost_on_time(tmp_path: Path) -> None:
    port = _two_free_ports()
    # node 0's ranks block on the lost node's; left at 5 s, the stall watchdog would race the
    # node-lost detection (LOST_AFTER_S, 5 s) and, on a loaded machine, sometimes end the run
    # first as a stall on node 0. This test is about the loss, so the watchdog waits longer.
    slow_watchdog = ("--stall-timeout", "60s")
    head = _node(tmp_path, 0, port, "--policy", "drain", "--duration", "60s", *slow_watchdog)
    other = _node(tmp_path, 1, port, "--policy", "drain", "--duration", "60s", *slow_watchdog)
    try:
        deadline = time.monotonic() + 120
        while not _running_for(tmp_path / "node1", 3.0):
            assert time.monotonic() < deadline, "node 1's ranks never started"
            assert head.poll() is None and other.poll() is None
            time.sleep(0.2)
        for proc in [psutil.Process(other.pid), *psutil.Process(other.pid).children(recursive=True)]:
            proc.kill()  # the whole node: its hicache, torchrun and ranks
        killed = time.monotonic()
        head_out, _ = head.communicate(timeout=60)
        noticed_s = time.monotonic() - killed
    finally:
        for proc in (head, other):
            if proc.poll() is None:
                proc.kill()
        other.communicate()

    assert head.returncode == 3, head_out
    assert noticed_s < 20  # a few seconds of silence, then the report
    report = json.loads((tmp_path / "node0" / "report.json").read_text())
    assert report["status"] == "failed"
    by_rank = {f["rank"]: f for f in report["failures"]}
    lost = [r["rank"] for r in report["ranks"] if r["node"] == 1]
    assert report["root_cause"] in lost
    for rank in lost:
        assert by_rank[rank]["kind"] == "crash"
        assert "node 1" in by_rank[rank]["message"] and "lost" in by_rank[rank]["message"]
    for rank, failure in by_rank.items():
        if rank not in lost:
            assert failure.get("consequence_of") in lost


def _running_for(run_dir: Path, seconds: float, ranks: int = 2) -> bool:
    files = list(run_dir.glob("rank-*.jsonl"))
    if len(files) < ranks:
        return False
    for path in files:
        text = path.read_text()
        complete = text[: text.rfind("\n")].splitlines()  # a rank may be writing the last line
        if not complete or json.loads(complete[-1])["t"] < seconds:
            return False
    return True


def test_node_0_learns_at_once_that_a_node_refused_to_start(tmp_path: Path) -> None:
    port = _two_free_ports()
    head = _node(tmp_path, 0, port, "--duration", "5s")
    other = _node(tmp_path, 1, port, "--duration", "6s")
    other_out, _ = other.communicate(timeout=120)
    refused = time.monotonic()
    head_out, _ = head.communicate(timeout=120)
    told_s = time.monotonic() - refused

    assert other.returncode == 2, other_out
    assert "this node's options differ from node 0's: duration_s 6.0 here, 5.0 on node 0" in other_out
    assert head.returncode == 3, head_out
    assert told_s < 10  # was the whole start-up timeout, 90 s
    why = "node 1 refused to start: its options differ from node 0's: duration_s 6.0 on node 1, 5.0 on node 0"
    assert why in " ".join(head_out.split())  # the console may wrap it
    report = json.loads((tmp_path / "node0" / "report.json").read_text())
    assert report["status"] == "failed"
    assert all(why in f["message"] and "never reached" not in f["message"] for f in report["failures"])


# What a stranger on this machine tries with torch's own client, as against the old TCPStore:
# read the config, push a forged line, stop the run. It must not get past the greeting.
TCPSTORE_OUTSIDER = """
import sys
from datetime import timedelta
from torch.distributed import DistError, TCPStore
print("ready", flush=True)
sys.stdin.readline()  # torch is imported (seconds on a loaded machine): now, while the run runs
try:
    store = TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=timedelta(seconds=1))
    store.get("hicache/hicache/config")
    store.queue_push("hicache/hicache/samples", "not JSON")
    store.set("hicache/hicache/stop", "an outsider")
    print("got in")
except DistError:
    print("kept out")
"""


def test_an_outsider_cannot_read_forge_into_or_stop_a_two_node_run(tmp_path: Path) -> None:
    port = _two_free_ports()
    # the TCPStore client starts first and waits with torch imported: once the run runs, it
    # tries at once, well inside the run's 6 s even on a loaded machine
    store = subprocess.Popen([sys.executable, "-c", TCPSTORE_OUTSIDER, str(port + 1)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert store.stdout is not None and store.stdout.readline().strip() == "ready"
    head = _node(tmp_path, 0, port, "--duration", "6s", pp=2)
    other = _node(tmp_path, 1, port, "--duration", "6s", pp=2)
    try:
        deadline = time.monotonic() + 120
        while not _running_for(tmp_path / "node0", 1.0, ranks=2):
            assert time.monotonic() < deadline, "the ranks never started"
            assert head.poll() is None and other.poll() is None
            time.sleep(0.2)
        # first, while node 1 surely still follows its files (the outsider below imports torch:
        # seconds on a loaded machine): a rank's file on node 1 gets a line that is not JSON
        (remote,) = (tmp_path / "node1").glob("rank-*.jsonl")
        with remote.open("a", encoding="utf-8") as fh:
            fh.write("this line is not JSON\n")
        assert send_raw("127.0.0.1", port + 1, b"this line is not JSON\n").find(REFUSED_PROOF) == -1
        options = {**json.loads((tmp_path / "node0" / "config.json").read_text()), "nnodes": 2, "rdzv_id": "hicache"}
        assert forge("127.0.0.1", port + 1, node=1, rank=1, options=options) == REFUSED_PROOF
        said, errors = store.communicate("go\n", timeout=60)
        assert said.strip() == "kept out", said + errors
        other_out, _ = other.communicate(timeout=120)
        head_out, _ = head.communicate(timeout=120)
    finally:
        for proc in (head, other, store):
            if proc.poll() is None:
                proc.kill()

    assert head.returncode == 0, head_out
    assert other.returncode == 0, other_out
    report = json.loads((tmp_path / "node0" / "report.json").read_text())
    assert (report["status"], report["stopped_early"], report["failures"]) == ("completed", None, [])
    assert all(r["rss"]["peak_bytes"] < 10e9 for r in report["ranks"])  # no forged 99 GB peak
    assert "outsider" not in (tmp_path / "node0" / "report.json").read_text()
    kept = [line for line in remote.read_text().splitlines() if line != "this line is not JSON"]
    assert (tmp_path / "node0" / remote.name).read_text().splitlines() == kept  # all but that line, byte for byte
    link = json.loads((tmp_path / "node0" / "node-link.json").read_text())
    assert link["dropped"][UNPROVEN] == 1
    assert link["dropped"][BAD_LINES] == 1
    assert link["dropped"][NOT_THE_PROTOCOL] >= 2  # the line, and each of the TCPStore client's tries
    assert "node 0's link dropped" in head_out
    names = {p.name for p in (tmp_path / "node0").iterdir()}
    assert names <= {".hicache-run", "config.json", "torchrun.log", "report.json", "node-link.json"} | {
        f"rank-{r}.{ext}" for r in (0, 1) for ext in ("jsonl", "log")
    }
