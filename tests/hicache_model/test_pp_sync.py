"""Topology arithmetic and PP sync on a single-stage pipeline (no process group needed)."""

from __future__ import annotations

import pytest
import torch

from hicache_model import pp_sync
from hicache_model.pp_sync import Groups, PPSync, Topology
from hicache_model.work_list import WorkList
from tests.fakes import FakeIsend, FakeRecv


@pytest.mark.parametrize(
    ("rank", "pp_rank", "tp_rank", "prev_rank", "next_rank"),
    [
        (0, 0, 0, None, 2),
        (1, 0, 1, None, 3),
        (2, 1, 0, 0, 4),
        (3, 1, 1, 1, 5),
        (4, 2, 0, 2, 6),
        (5, 2, 1, 3, 7),
        (6, 3, 0, 4, None),
        (7, 3, 1, 5, None),
    ],
)
def test_topology_places_ranks_pp_major(
    rank: int, pp_rank: int, tp_rank: int, prev_rank: int | None, next_rank: int | None
) -> None:
    topo = Topology(rank=rank, pp_size=4, tp_size=2)
    assert (topo.pp_rank, topo.tp_rank) == (pp_rank, tp_rank)
    assert (topo.prev_rank, topo.next_rank) == (prev_rank, next_rank)
    assert topo.world_size == 8


def test_topology_group_members() -> None:
    topo = Topology(rank=0, pp_size=4, tp_size=2)
    assert topo.tp_ranks(2) == [4, 5]
    assert topo.pp_ranks(1) == [1, 3, 5, 7]


def test_single_stage_has_no_neighbours() -> None:
    topo = Topology(rank=0, pp_size=1, tp_size=1)
    assert (topo.pp_rank, topo.tp_rank, topo.prev_rank, topo.next_rank) == (0, 0, None, None)


def test_single_stage_sync_sends_nothing_and_returns_its_counts() -> None:
    works = WorkList()
    sync = PPSync(Topology(0, 1, 1), Groups(None, None), works)
    for count in ([3], [0], [2, 5]):
        counts = torch.tensor(count, dtype=torch.int32)
        assert sync.agree(counts).tolist() == count
    assert (sync.sent, sync.received, sync.tp_all_reduces) == (0, 0, 0)
    assert len(works) == 0 and works.held_bytes == 0


def first_stage_of_two(monkeypatch: pytest.MonkeyPatch, isend: FakeIsend) -> PPSync:
    monkeypatch.setattr(pp_sync.dist, "isend", isend)
    return PPSync(Topology(rank=0, pp_size=2, tp_size=1), Groups(None, None), WorkList())


def test_first_stage_sends_a_clone_and_keeps_the_work(monkeypatch: pytest.MonkeyPatch) -> None:
    isend = FakeIsend()
    sync = first_stage_of_two(monkeypatch, isend)
    counts = torch.tensor([4], dtype=torch.int32)

    assert sync.agree(counts) is counts

    ((sent, dst, _),) = isend.calls
    assert dst == 1 and sent.tolist() == [4]
    assert sent is not counts  # the payload outlives the round: a clone, kept with its Work
    (pending,) = list(sync.work_list)
    assert pending.data is sent and pending.peer == 1
    assert sync.work_list.held_bytes == 4
    assert (sync.sent, sync.received) == (1, 0)


def test_a_send_failing_after_a_timed_out_wait_names_the_closed_peer(monkeypatch: pytest.MonkeyPatch) -> None:
    sync = first_stage_of_two(monkeypatch, FakeIsend(error="Connection closed by peer"))
    sync.work_list.timed_out_peers.add(1)
    with pytest.raises(pp_sync.ClosedAfterTimeout, match="rank 1") as info:
        sync.agree(torch.tensor([0], dtype=torch.int32))
    assert info.value.peer == 1
    assert len(sync.work_list) == 0 and sync.sent == 0


def test_a_send_failing_without_an_earlier_timeout_is_passed_through(monkeypatch: pytest.MonkeyPatch) -> None:
    sync = first_stage_of_two(monkeypatch, FakeIsend(error="Connection closed by peer"))
    with pytest.raises(RuntimeError, match="Connection closed by peer") as info:
        sync.agree(torch.tensor([0], dtype=torch.int32))
    assert not isinstance(info.value, pp_sync.ClosedAfterTimeout)


def test_neighbours_are_addressed_by_their_rank_in_the_pp_group(monkeypatch: pytest.MonkeyPatch) -> None:
    # pp 3 x tp 2, the middle stage's second TP rank (global 3): its PP group is ranks 1, 3, 5,
    # in which it is rank 1; it receives from group rank 0 and sends to group rank 2 (global 5),
    # as SGLang's _pp_sync does with group_src/group_dst.
    isend, recv = FakeIsend(), FakeRecv(value=7)
    monkeypatch.setattr(pp_sync.dist, "isend", isend)
    monkeypatch.setattr(pp_sync.dist, "recv", recv)
    group = object()
    sync = PPSync(Topology(rank=3, pp_size=3, tp_size=2), Groups(None, group), WorkList())  # type: ignore[arg-type]

    for _ in range(3):
        assert sync.agree(torch.zeros(1, dtype=torch.int32)).tolist() == [7]

    assert recv.calls == [{"src": None, "group_src": 0, "group": group}] * 3
    assert [(dst, g) for _, dst, g in isend.calls] == [(2, group)] * 3
    assert [(s.peer, s.peer_pp) for s in sync.work_list] == [(5, 2)] * 3  # global rank and stage, for reports
    assert (sync.sent, sync.received) == (3, 3)
    assert sync.work_list.blocked_on is None
