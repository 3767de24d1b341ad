"""analysis.messages: messages per peer and the backlog of each pair, on synthetic samples."""

from __future__ import annotations

import dataclasses

import pytest

from hicache_cli.analysis.messages import backlog_points, growing_backlogs, peer_flows, peer_rows, peer_series
from tests.conftest import build_sample


def sender(t: float, sent: int, wall: float | None = None, rank: int = 0, peer: int = 1):  # noqa: ANN201
    s = build_sample(rank, t, works={"live": 0}, peers=[[peer, "0", sent, 4 * sent, 0, 0]])
    return s if wall is None else build_sample(rank, t, wall=wall, works={"live": 0}, peers=s.peers)


def receiver(t: float, received: int, wall: float | None = None, rank: int = 1, peer: int = 0):  # noqa: ANN201
    peers = [[peer, "0", 0, 0, received, 4 * received]]
    return build_sample(rank, t, works={"live": 0}, peers=peers, **({} if wall is None else {"wall": wall}))


def test_rows_are_the_tracer_s_or_hicache_s_pp_sync_counts() -> None:
    traced = peer_rows(sender(1.0, 10))
    assert [(r.peer, r.group, r.sent, r.sent_bytes) for r in traced] == [(1, "0", 10, 40)]
    own = peer_rows(build_sample(2, 1.0, sent=7, received=5), tp=2)
    assert [(r.peer, r.group, r.sent, r.received, r.sent_bytes) for r in own] == [
        (4, "pp", 7, 0, None),
        (0, "pp", 0, 5, None),
    ]
    assert peer_rows(build_sample(0, 1.0, works={"live": 0})) == []  # traced before rows were counted


def test_the_receiver_s_count_is_taken_at_the_sender_s_time() -> None:
    """Sender and receiver keep pace exactly (100/s) but sample 50 ms apart: no backlog."""
    a = [sender(i / 10, 10 * i, wall=1000.0 + i / 10) for i in range(20)]
    b = [receiver(i / 10, 10 * i + 5, wall=1000.05 + i / 10) for i in range(20)]
    points = backlog_points(a, b, "0")
    assert all(abs(v) < 1e-6 for _, v in points[1:-1])


@pytest.mark.parametrize(("received_per_s", "grows"), [(100, True), (1000, False)])
def test_a_backlog_grows_when_the_receiver_falls_behind(received_per_s: int, grows: bool) -> None:
    run = {
        0: [sender(i / 10, 100 * i) for i in range(100)],  # 1000 messages a second
        1: [receiver(i / 10, received_per_s * i // 10) for i in range(100)],
    }
    (flow,) = peer_flows(run, 0, warmup_s=1.0)
    assert flow.backlog == 100 * 99 - received_per_s * 99 // 10
    assert flow.backlog_grows is grows
    assert growing_backlogs([flow]) == ([flow] if grows else [])
    if grows:
        assert flow.backlog_per_s == pytest.approx(900, rel=0.01)
    (back,) = peer_flows(run, 1)
    assert back.backlog is None  # rank 1 sent nothing


def test_a_backlog_that_drains_by_the_end_is_not_growing() -> None:
    run = {
        0: [sender(i / 10, 100 * i) for i in range(100)],
        1: [receiver(i / 10, 100 * i if i == 99 else 10 * i) for i in range(100)],  # caught up at the last
    }
    (flow,) = peer_flows(run, 0, warmup_s=1.0)
    assert flow.backlog == 0 and not flow.backlog_grows


def test_a_peer_is_the_process_whose_time_overlaps_most() -> None:
    """Two process groups with the same ranks one after the other (slots 1 and 3)."""
    first = [receiver(i, 0, wall=1000.0 + i) for i in range(10)]
    second = [receiver(i, 0, wall=1020.0 + i) for i in range(10)]
    mine = [sender(i, 0, wall=1021.0 + i) for i in range(10)]
    assert peer_series({2: mine, 1: first, 3: second}, 2, 1) is second
    assert peer_series({2: mine}, 2, 1) == []


def in_world(sample, world: str):  # noqa: ANN001, ANN201
    return dataclasses.replace(sample, world=world)


def test_a_peer_is_the_rank_of_the_same_world() -> None:
    """Issue 38: torchrun's ranks 0 and 1 (world A, the whole run long) and two forkserver
    workers that form their own gloo group (world B, ranks 0 and 1 too). Worker 0 sent 7,485
    messages to worker 1, which received them all; torchrun's rank 1 received none from its
    rank 0. Paired by rank number alone, worker 0 met torchrun's rank 1 (it overlaps longer):
    "7485 sent, 0 received by rank 1"."""
    a = "tcp://127.0.0.1:29500"
    b = "tcp://127.0.0.1:41234"
    run = {
        0: [in_world(build_sample(0, i / 10, works={"live": 0}, peers=[]), a) for i in range(300)],
        1: [in_world(receiver(i / 10, 0), a) for i in range(300)],
        2: [in_world(sender(i / 10, 75 * i, wall=1_700_000_005.0 + i / 10), b) for i in range(100)],
        3: [in_world(receiver(i / 10, 75 * i, wall=1_700_000_005.0 + i / 10), b) for i in range(100)],
    }
    assert peer_series(run, 2, 1) is run[3]
    (flow,) = peer_flows(run, 2, warmup_s=1.0)
    assert (flow.sent, flow.backlog) == (7425, 0) and not flow.backlog_grows
    assert peer_series(run, 0, 1) is run[1]  # and torchrun's ranks still pair with each other
