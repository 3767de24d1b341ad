"""Issue 38: the cause, the pairing and the end that `hicache trace` and `check -- COMMAND` say,
on programs written afresh the way users write them (programs/), each beside a twin that does
the same work carefully and stays clean. Real gloo ranks forked by a launcher of the kind
users write (programs/fork_launch.py, torch.multiprocessing), the real CLI; torchrun itself
is traced in test_trace_real and test_explain_real.

- stats_ring.py: both ranks keep their last 64 Works in a deque(maxlen=64), never waited;
- progress_beacon.py: a send loop that lets each isend's Work go;
- ping_ack.py: a request/reply exchange that lets the request's Work go, then waits for the reply;
- last_count.py: the first stage returns with its last send unwaited; the receiver ends normally;
- loader_stall.py: one rank's data loader dies, and the other waits in a blocking all_reduce;
- worker_world.py: forkserver helpers that form a gloo world of their own beside the launcher's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.attach_helpers import FORK_LAUNCH, TORCHRUN
from tests.integration.test_trace_real import Traced, program, trace

pytestmark = pytest.mark.slow


def line_of(name: str, text: str) -> int:
    source = Path(program(name)).read_text().splitlines()
    return 1 + next(i for i, line in enumerate(source) if text in line)


def two_ranks(name: str, *args: str) -> tuple[str, ...]:
    return (*FORK_LAUNCH, "--nproc-per-node", "2", program(name), *args)


def check(tmp: Path, *command: str, duration: str, stall: str | None = None) -> Traced:
    options = ("--duration", duration, *(("--stall-timeout", stall) if stall else ()))
    return trace(tmp, *command, verb="check", options=options)


def test_a_deque_of_unwaited_works_fails_the_gate_by_the_works_it_drops(tmp_path: Path) -> None:
    """Both ranks drop the Work the deque lets go of, never waited: on gloo the messages are lost
    and each dropped Work leaves its state behind. The verdict names the drops (was: INCONCLUSIVE,
    "memory grows, not from Works or messages"), and `check` fails it."""
    run = check(tmp_path, *two_ranks("stats_ring.py", "--seconds", "8"), duration="16s")
    assert run.proc.returncode == 1, run.proc.stdout + run.proc.stderr
    monitor = run.rank(1)
    assert (monitor["verdict"], monitor["cause"]["kind"]) == ("LEAK", "dropped"), monitor["verdict_reason"]
    site = f"stats_ring.py:{line_of('stats_ring.py', 'dist.irecv(')} in monitor (irecv from rank 0)"
    assert monitor["cause"]["site"] == site
    assert monitor["cause"]["per_s"] > 100 and monitor["cause"]["dropped"] > 1000
    assert monitor["verdict_reason"].startswith("Works dropped unwaited grow by ")
    assert " B a dropped Work" in monitor["verdict_reason"]
    # the trainer's sends mostly find the monitor's receive already posted (it posts ahead):
    # those cost nothing, and its RSS may straddle the gate's 200 MB/h; its drops are named
    # either way, as the cause when its memory decides, else after its reason
    trainer = run.rank(0)
    sent_at = f"stats_ring.py:{line_of('stats_ring.py', 'dist.isend(')} in trainer (isend to rank 1)"
    if trainer["verdict"] == "LEAK":
        assert (trainer["cause"]["kind"], trainer["cause"]["site"]) == ("dropped", sent_at)
    else:
        assert "; Works dropped unwaited: " in trainer["verdict_reason"] and sent_at in trainer["verdict_reason"]


def test_its_twin_that_waits_each_work_before_the_deque_drops_it_passes(tmp_path: Path) -> None:
    run = check(tmp_path, *two_ranks("stats_ring.py", "--seconds", "8", "--wait-oldest"), duration="60s")
    assert run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
    for rank in (0, 1):
        r = run.rank(rank)
        assert (r["verdict"], r["cause"]) == ("BOUNDED", None), r["verdict_reason"]
        assert r["works"]["created"] > 1000 and r["works"]["dropped"] <= 64  # the monitor's last posts
        assert r["stuck"] is None


def test_a_send_loop_that_drops_each_isend_work_leaks_by_them_and_then_hangs(tmp_path: Path) -> None:
    """The first report lost wedges the connection: nothing after it arrives, the dashboard
    waits in recv for good and the trainer's last blocking send never completes. Both are
    said to be stuck where they are; the trainer's memory grew by its drops. The trace's
    duration counts the program's start-up, 6 s of training and 3 s stuck: 15 s was too short
    under torchrun beside the whole suite on a slow machine of this kind (torch's import 1.5 CPU-s)."""
    run = trace(tmp_path, *two_ranks("progress_beacon.py", "--seconds", "6"),
                options=("--duration", "20s", "--stall-timeout", "3s"))  # fmt: skip
    trainer, dashboard = run.rank(0), run.rank(1)
    assert (trainer["verdict"], trainer["cause"]["kind"]) == ("LEAK", "dropped"), trainer["verdict_reason"]
    line = line_of("progress_beacon.py", "work = dist.isend(")
    assert trainer["cause"]["site"] == f"progress_beacon.py:{line} in trainer (isend to rank 1)"
    assert trainer["stuck"]["blocked_in"].startswith("send to rank 1 at progress_beacon.py:")
    assert dashboard["stuck"]["blocked_in"].startswith("recv from rank 0 at progress_beacon.py:")
    assert dashboard["messages"]["by_peer"][0]["received"] < trainer["works"]["created"] / 100


def test_its_twin_that_waits_each_send_ends_clean(tmp_path: Path) -> None:
    """BOUNDED needs seconds of data after the warm-up (5 s flat out read INCONCLUSIVE once
    under the suite's load): 10 s, a step taking a millisecond as a model's would."""
    run = trace(tmp_path, *two_ranks("progress_beacon.py", "--seconds", "10", "--wait", "--step-ms", "1"),
                options=("--duration", "60s", "--stall-timeout", "3s"))  # fmt: skip
    assert run.proc.returncode == 0, run.proc.stderr
    for rank in (0, 1):
        r = run.rank(rank)
        assert (r["verdict"], r["cause"], r["stuck"], r["shutdown"]) == ("BOUNDED", None, None, None), r
    assert run.rank(0)["works"]["dropped"] == 0


def test_a_request_reply_exchange_that_drops_the_request_s_work_hangs_and_is_said_stuck(tmp_path: Path) -> None:
    """The client's isend goes out before the server has posted its next receive, is queued,
    and is lost with its Work: the server waits for the request, the client for the reply.
    No Work, no message for the rest of the run: `check` cannot pass it."""
    run = check(tmp_path, *two_ranks("ping_ack.py", "--rounds", "2000"), duration="20s", stall="3s")
    assert run.proc.returncode == 3, run.proc.stdout + run.proc.stderr
    client, server = run.rank(0), run.rank(1)
    assert client["works"]["dropped"] < 2000  # it hung before the last round
    assert client["stuck"]["blocked_in"] == f"recv from rank 1 at ping_ack.py:{line_of('ping_ack.py', 'dist.recv(')}"
    assert server["stuck"]["blocked_in"].startswith("recv from rank 0 at ping_ack.py:")
    for r in (client, server):
        assert r["verdict_reason"].endswith(r["stuck"]["text"]) and r["stuck"]["for_s"] > 3
    assert "no progress for the last" in run.proc.stdout + run.proc.stderr


def test_its_twin_that_waits_the_request_s_send_runs_to_the_end(tmp_path: Path) -> None:
    run = check(tmp_path, *two_ranks("ping_ack.py", "--rounds", "2000", "--wait-send"), duration="90s", stall="3s")
    assert run.report["program_exit_code"] == 0, run.proc.stdout + run.proc.stderr
    assert [r["stuck"] for r in run.report["ranks"]] == [None, None]
    assert run.rank(0)["works"]["waited"] == 2000


@pytest.mark.parametrize("wait_last", [False, True], ids=["last send unwaited", "last send waited"])
def test_a_receiver_that_ended_normally_is_no_shutdown_hazard(tmp_path: Path, wait_last: bool) -> None:
    """The receiver's last sample caught it in recv (it spends its rounds there), then it got
    the last count, acknowledged it and exited normally: no hazard of its own. The sender's
    last send, never waited, is one; its twin waits it."""
    # under torchrun: how a rank's process ended is read (a forked rank leaves with os._exit)
    run = trace(tmp_path, *TORCHRUN, "--nproc-per-node", "2", program("last_count.py"), "--rounds", "300",
                *(["--wait-last"] if wait_last else []))  # fmt: skip
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.rank(1)["shutdown"] is None
    assert run.rank(1)["stop"] == "the process exited"
    line = line_of("last_count.py", "dist.isend(")
    expected = None if wait_last else [f"rank 0 ended with 1 send to rank 1 never waited (last_count.py:{line})"]
    assert (run.rank(0)["shutdown"] or {}).get("lines") == expected


def test_a_hung_collective_is_said_stuck_on_both_ranks(tmp_path: Path) -> None:
    """Rank 1's loader dies; rank 1 waits on its queue, rank 0 in a blocking all_reduce: no
    Work reaches the program, no message, for the rest of the run (was: BOUNDED, no hint).
    30 s: the duration counts the program's start-up, which under torchrun took all but 1 s of
    15 beside a CPU hog; the hung ranks wait without spinning, so the rest costs only the probes."""
    run = trace(tmp_path, *two_ranks("loader_stall.py", "--steps", "3000", "--loader-dies-after", "200"),
                options=("--duration", "30s", "--stall-timeout", "3s"))  # fmt: skip
    for rank in (0, 1):
        r = run.rank(rank)
        assert r["stuck"] is not None and r["stuck"]["for_s"] > 3, r["verdict_reason"]
        assert r["verdict_reason"].endswith(r["stuck"]["text"])
        assert r["stop"] == "stopped by hicache at the end of the trace"


def test_its_twin_whose_loader_lives_trains_to_the_end(tmp_path: Path) -> None:
    run = trace(tmp_path, *two_ranks("loader_stall.py", "--steps", "1500"), options=("--stall-timeout", "3s"))
    assert run.proc.returncode == 0, run.proc.stderr
    assert [r["stuck"] for r in run.report["ranks"]] == [None, None]
    assert "rank 0: trained" in run.proc.stdout


def test_forkserver_helpers_in_their_own_world_are_paired_with_each_other(tmp_path: Path) -> None:
    """Helper 0 sends 3,000 messages to helper 1, its world's rank 1; the launcher's rank 1 gets
    none. Paired by rank number alone, "3000 sent, 0 received by rank 1"; by world, none behind."""
    run = trace(tmp_path, *two_ranks("worker_world.py", "--messages", "3000"))
    assert run.proc.returncode == 0, run.proc.stderr
    processes = run.report["ranks"]
    assert len(processes) == 4 and len({r["slot"] for r in processes}) == 4
    (helper0,) = [r for r in processes if r["rank"] == 0 and r["works"]["created"] == 3000]
    (to_1,) = helper0["messages"]["by_peer"]
    assert (to_1["peer"], to_1["sent"], to_1["backlog"]) == (1, 3000, 0)
    assert all(r["cause"] is None and r["verdict"] != "LEAK" for r in processes)
