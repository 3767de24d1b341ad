"""causes: why a traced program's memory grows (live Works, a message backlog, or neither),
on traced runs recorded here (tests/data/traced, README there) and synthetic samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from hicache_cli.analysis.causes import judge
from hicache_cli.analysis.kinds import CauseKind as Cause
from hicache_cli.series import read_run
from tests.conftest import build_sample

TRACED = Path(__file__).resolve().parents[1] / "data" / "traced"
THRESHOLD = 100.0


def judged(run: str, rank: int):  # noqa: ANN201
    samples = read_run(TRACED / run)
    return judge(samples, rank, None, THRESHOLD)


def test_a_sender_that_outruns_its_receiver_leaks_by_its_backlog() -> None:
    """rank 0 keeps the last 8 send Works (deque(maxlen=8)) and never waits them: live Works
    stay at 8, so the cause is the messages to rank 1 piling up, not those 8 Works."""
    sender = judged("outrunning", 0)
    assert (sender.verdict.verdict, sender.verdict.basis) == ("LEAK", "backlog")
    finding = sender.finding
    assert finding is not None and finding.cause is Cause.BACKLOG
    assert (finding.peer, finding.group) == (1, "0")
    assert finding.per_s is not None and finding.per_s > 1000
    assert finding.site is not None and (finding.site.op, finding.site.line) == ("isend", 40)
    reason = sender.verdict.reason
    assert reason.startswith(f"messages to rank 1 pile up: backlog +{finding.per_s:.0f}/s")
    assert "sent from telemetry_stream.py:40 in sender (isend to rank 1)" in reason
    assert "8 live Works" not in reason
    receiver = judged("outrunning", 1)
    assert receiver.verdict.verdict != "LEAK" and receiver.finding is None


def test_its_flow_controlled_twin_is_bounded() -> None:
    """The same unwaited deque, but rank 1 acks every 8 updates and rank 0 waits for the ack."""
    for rank in (0, 1):
        result = judged("flow-controlled", rank)
        assert result.verdict.verdict == "BOUNDED", result.verdict.reason
        assert result.finding is None
    (to_1,) = judged("flow-controlled", 0).flows
    assert to_1.sent > 1000 and abs(to_1.backlog) <= 8 and not to_1.backlog_grows


def test_memory_that_grows_without_works_or_messages_is_named_not_a_work_leak() -> None:
    """A loop that waits its Works and appends to a Python list every step."""
    for rank in (0, 1):
        result = judged("metrics-history", rank)
        assert (result.verdict.verdict, result.verdict.basis) == ("INCONCLUSIVE", "memory")
        assert result.finding is not None and result.finding.cause is Cause.MEMORY
        assert result.verdict.reason.startswith("memory grows, not from Works or messages: RSS +")
        assert "no message backlog grows" in result.verdict.reason


@pytest.mark.parametrize("rank", [0, 1])
def test_a_pipelining_trainer_is_no_leak(rank: int) -> None:
    result = judged("pipelining-gpipe", rank)
    assert result.verdict.verdict != "LEAK", result.verdict.reason
    assert all(not flow.backlog_grows for flow in result.flows)


def traced_pair(live_per_s: float, sent_per_s: float, received_per_s: float, n: int = 100) -> dict:
    """Two traced processes at 10 Hz: rank 0's live Works and sends to rank 1, rank 1's receives."""
    site = {"file": "/x/leaky.py", "line": 23, "function": "main", "op": "isend", "peer": 1, "created": 5, "live": 5}
    ranks = {0: [], 1: []}
    for i in range(n):
        t = i / 10
        sent, received = int(sent_per_s * t), int(received_per_s * t)
        live = int(live_per_s * t)
        ranks[0].append(
            build_sample(0, t, depth=live, works={"live": live}, peers=[[1, "0", sent, 8 * sent, 0, 0]], sites=[site])
        )
        ranks[1].append(build_sample(1, t, works={"live": 0}, peers=[[0, "0", 0, 0, received, 8 * received]]))
    return ranks


def test_growing_works_are_the_cause_and_a_growing_backlog_is_said_too() -> None:
    result = judge(traced_pair(live_per_s=500, sent_per_s=500, received_per_s=100), 0, None, THRESHOLD)
    assert (result.verdict.verdict, result.finding.cause) == ("LEAK", Cause.WORKS)
    assert "live Works grow by" in result.verdict.reason
    assert "; messages to rank 1 pile up: backlog +400/s" in result.verdict.reason


def test_hicache_s_own_ranks_get_no_cause() -> None:
    stress = {r: [build_sample(r, i / 10, depth=i * 100 * (r == 0), sent=i * 100) for i in range(100)] for r in (0, 1)}
    result = judge(stress, 0, None, THRESHOLD)
    assert result.verdict.verdict == "LEAK" and result.finding is None
