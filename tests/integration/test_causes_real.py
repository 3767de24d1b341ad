"""Why memory grows, on real traced programs written the way users write them
(tests/integration/programs): a sender that outruns its receiver, its flow-controlled twin,
a loop that keeps every step's metrics, and a PP sync that returns with its last send
unwaited. Real gloo ranks (forked by programs/fork_launch.py, torch imported once), the real
CLI; seconds of workload each."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.attach_helpers import FORK_LAUNCH
from tests.integration.test_trace_real import program, trace

pytestmark = pytest.mark.slow


def line_of(name: str, text: str) -> int:
    source = Path(program(name)).read_text().splitlines()
    return 1 + next(i for i, line in enumerate(source) if text in line)


def test_a_sender_that_drops_its_send_works_is_a_leak_by_them_its_backlog_said(tmp_path: Path) -> None:
    """The deque(maxlen=8) lets each send Work go unwaited; the first let go before the
    collector posted its receive is lost, and nothing after it arrives: the drops are the
    cause, the backlog they leave (sent, never received) is said beside them."""
    run = trace(tmp_path, *FORK_LAUNCH, "--nproc-per-node", "2", program("telemetry_stream.py"), "--seconds", "6")
    sender = run.rank(0)
    assert sender["verdict"] == "LEAK", sender["verdict_reason"]
    cause = sender["cause"]
    assert cause["kind"] == "dropped" and cause["per_s"] > 100 and cause["dropped"] > 1000
    line = line_of("telemetry_stream.py", "dist.isend(")
    assert cause["site"] == f"telemetry_stream.py:{line} in sender (isend to rank 1)"
    # the reason prints the rate it measured, the report keeps it rounded to a decimal: a rate
    # like 25935.49 is "+25935/s" there and 25935.5 here, so the two may differ by one
    said = re.match(r"Works dropped unwaited grow by (\d+)/s", sender["verdict_reason"])
    assert said is not None and abs(int(said[1]) - cause["per_s"]) <= 1, sender["verdict_reason"]
    assert "; messages to rank 1 pile up: backlog +" in sender["verdict_reason"]
    assert f"sent from telemetry_stream.py:{line} in sender (isend to rank 1)" in sender["verdict_reason"]
    assert sender["works"]["live_max"] <= 9  # the deque keeps 8: the Works are not what grows
    (to_1,) = sender["messages"]["by_peer"]
    assert to_1["backlog"] == to_1["sent"] - run.rank(1)["messages"]["by_peer"][0]["received"] > 1000


def test_its_flow_controlled_twin_is_bounded(tmp_path: Path) -> None:
    run = trace(tmp_path, *FORK_LAUNCH, "--nproc-per-node", "2", program("telemetry_stream.py"),
                "--seconds", "12", "--ack-every", "8")  # fmt: skip
    assert run.proc.returncode == 0, run.proc.stderr
    for rank in (0, 1):
        r = run.rank(rank)
        assert r["verdict"] == "BOUNDED", r["verdict_reason"]
        assert r["cause"] is None
    (to_1,) = run.rank(0)["messages"]["by_peer"]
    assert to_1["sent"] > 100 and abs(to_1["backlog"]) <= 8


def test_memory_that_grows_without_works_or_messages_is_said_so(tmp_path: Path) -> None:
    """One run serves both: `check -- COMMAND` traces as `trace` does (the same report), then
    gates. A step takes 1 ms (--interval), as a training step takes some: ~1 MB/s kept."""
    gate = trace(tmp_path, *FORK_LAUNCH, "--nproc-per-node", "2", program("metrics_history.py"),
                 "--seconds", "12", "--interval", "0.001", verb="check")  # fmt: skip
    for rank in (0, 1):
        r = gate.rank(rank)
        assert (r["verdict"], r["cause"]["kind"]) == ("INCONCLUSIVE", "memory"), r["verdict_reason"]
        assert r["verdict_reason"].startswith("memory grows, not from Works or messages: RSS +")
    assert gate.proc.returncode == 0, gate.proc.stderr[-3000:]  # no Work leak: passed unless a memory limit is asked


def test_a_program_that_returns_with_its_last_send_unwaited_is_named(tmp_path: Path) -> None:
    run = trace(tmp_path, *FORK_LAUNCH, "--nproc-per-node", "2", program("drain_at_round_start.py"))
    line = line_of("drain_at_round_start.py", "dist.isend(")
    expected = f"rank 0 ended with 1 send to rank 1 never waited (drain_at_round_start.py:{line})"
    assert run.rank(0)["shutdown"]["lines"][0] == expected
    assert f"shutdown hazard: {expected}" in run.proc.stderr  # hicache's lines; the program's go to stdout
