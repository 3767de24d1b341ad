"""causes: why a traced program's memory grows (live Works, Works dropped unwaited, a message
backlog, or none of them), on traced runs recorded here (tests/data/traced, README there) and
synthetic samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from hicache_cli.analysis.causes import judge
from hicache_cli.analysis.dropped import unseen
from hicache_cli.analysis.kinds import CauseKind as Cause
from hicache_cli.series import read_run
from tests.conftest import build_sample

TRACED = Path(__file__).resolve().parents[1] / "data" / "traced"
THRESHOLD = 100.0


def judged(run: str, rank: int):  # noqa: ANN201
    samples = read_run(TRACED / run)
    return judge(samples, rank, None, THRESHOLD)


def test_a_sender_that_drops_its_send_works_leaks_by_them_and_its_backlog_is_said() -> None:
    """rank 0 keeps the last 8 send Works (deque(maxlen=8)) and never waits them: live Works
    stay at 8. Each Work the deque lets go of is dropped unwaited, and on gloo the first one
    dropped before rank 1 posted its receive is lost and wedges the connection: rank 1
    receives 1 update of 236,137, and the rest pile up behind it. The drops are the cause,
    the backlog is said with them, and the verdict settles as a backlog's does."""
    sender = judged("outrunning", 0)
    assert (sender.verdict.verdict, sender.verdict.basis) == ("LEAK", "backlog")
    finding = sender.finding
    assert finding is not None and finding.cause is Cause.DROPPED
    assert finding.per_s is not None and finding.per_s > 1000
    assert finding.dropped is not None and finding.dropped > 200_000
    assert finding.site is not None and (finding.site.op, finding.site.line) == ("isend", 40)
    reason = sender.verdict.reason
    assert reason.startswith(f"Works dropped unwaited grow by {finding.per_s:.0f}/s ({finding.dropped} in all), ")
    assert "most at telemetry_stream.py:40 in sender (isend to rank 1): on gloo" in reason
    assert "B a dropped Work; messages to rank 1 pile up: backlog +" in reason
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


def dropping_process(drops_per_s: float, rss_per_s: float, op: str = "isend", seen_complete: bool = False) -> dict:
    """One traced process at 10 Hz for 20 s that drops `drops_per_s` Works made at one site
    with `op`, never waiting them (or, `seen_complete`, after is_completed() said True), while
    its RSS grows by `rss_per_s` bytes a second (with a page of jitter)."""
    samples = []
    for i in range(200):
        t = i / 10
        dropped = int(drops_per_s * t)
        completed = dropped if seen_complete else 0
        counts = {"created": dropped + 1, "waited": 0, "completed": completed, "dropped": dropped, "live": 1}
        site = {"file": "/x/ring.py", "line": 44, "function": "trainer", "op": op, "peer": 1, **counts}
        samples.append(
            build_sample(0, t, rss_bytes=int(200e6 + rss_per_s * t) + 4096 * (i % 2), works=counts, sites=[site])
        )
    return {0: samples}


def test_point_to_point_works_dropped_while_memory_grows_are_the_cause() -> None:
    """3,000 sends a second dropped unwaited, RSS +480 KB/s (160 B each): LEAK, cause dropped,
    with the rate, the site and what each dropped Work costs."""
    process = dropping_process(3000, 480_000)
    result = judge(process, 0, None, THRESHOLD)
    assert (result.verdict.verdict, result.verdict.basis) == ("LEAK", "dropped"), result.verdict.reason
    finding = result.finding
    total = process[0][-1].works["dropped"]
    assert finding is not None and finding.cause is Cause.DROPPED and finding.dropped == total
    assert finding.per_s == pytest.approx(3000, rel=0.01)
    reason = result.verdict.reason
    assert reason.startswith(f"Works dropped unwaited grow by 3000/s ({total} in all), most at ring.py:44 in trainer")
    assert "; RSS +1728 MB/h" in reason and ", 160 B a dropped Work" in reason


def test_works_dropped_while_memory_stays_flat_are_no_leak() -> None:
    """Dropping sends to a peer already waiting in its receive leaves nothing (hicache doctor):
    with RSS flat there is nothing to explain."""
    result = judge(dropping_process(3000, 0), 0, None, THRESHOLD)
    assert result.verdict.verdict == "BOUNDED" and result.finding is None


@pytest.mark.parametrize("op", ["all_reduce", "broadcast"])
def test_dropped_collectives_are_not_the_cause_of_growing_memory(op: str) -> None:
    """An async collective dropped unwaited costs nothing once it has run (hicache doctor): memory
    that grows beside them is not theirs, and stays INCONCLUSIVE as `memory`."""
    result = judge(dropping_process(3000, 480_000, op=op), 0, None, THRESHOLD)
    assert (result.verdict.verdict, result.finding.cause) == ("INCONCLUSIVE", Cause.MEMORY)


def test_works_seen_complete_before_they_were_dropped_do_not_count() -> None:
    """A reaper that drops only Works whose is_completed() said True (NCCL's do turn True)."""
    result = judge(dropping_process(3000, 480_000, seen_complete=True), 0, None, THRESHOLD)
    assert result.finding is not None and result.finding.cause is Cause.MEMORY
    assert unseen({"dropped": 10, "completed": 7, "waited": 2}) == 5
    assert unseen({"dropped": 10, "completed": 2, "waited": 2}) == 10


@pytest.mark.parametrize(("rank", "op", "line"), [(0, "isend", 44), (1, "irecv", 66)])
def test_a_deque_of_64_unwaited_works_leaks_by_the_works_it_drops(rank: int, op: str, line: int) -> None:
    """Issue 38 (tests/data/traced/deque-of-64, stats_ring.py): both ranks keep the last 64 Works
    in a deque(maxlen=64) and never wait any, so live Works stay at 64 and, the monitor posting
    its receives as fast as the trainer sends, no backlog grows. It was INCONCLUSIVE, "memory
    grows, not from Works or messages", with ~620k Works dropped; the drops are the cause."""
    result = judged("deque-of-64", rank)
    assert (result.verdict.verdict, result.verdict.basis) == ("LEAK", "dropped"), result.verdict.reason
    finding = result.finding
    assert finding is not None and finding.cause is Cause.DROPPED
    assert finding.site is not None and (finding.site.op, finding.site.line) == (op, line)
    assert finding.per_s is not None and finding.per_s > 1000
    assert " B a dropped Work" in result.verdict.reason


def test_drops_too_few_for_the_memory_growth_are_not_its_cause() -> None:
    """10 sends a second dropped while RSS grows 480 KB a second: 48 KB a dropped Work, more
    than a Work ever holds (hicache doctor: ~1.1 KB kept, ~170 B dropped). Memory, not drops."""
    result = judge(dropping_process(10, 480_000), 0, None, THRESHOLD)
    assert result.finding is not None and result.finding.cause is Cause.MEMORY, result.verdict.reason


def test_drops_beside_a_verdict_that_is_no_leak_are_said() -> None:
    """Memory flat (each send was delivered, or the run could not tell): no cause, the verdict
    stands, and the drops are said after its reason with their rate and site."""
    process = dropping_process(3000, 0)
    result = judge(process, 0, None, THRESHOLD)
    assert result.verdict.verdict == "BOUNDED" and result.finding is None
    total = process[0][-1].works["dropped"]
    assert result.verdict.reason.endswith(
        f"; Works dropped unwaited: 3000/s ({total} in all), most at ring.py:44 in trainer (isend to rank 1)"
    )
