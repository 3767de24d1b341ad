"""The regression test SGLang's fix (PR #28916) lacked, in the shape of its PP sync.

Every scheduler round the first pipeline stage `isend`s a count to the next stage and keeps
the Work in a list; the next stage blocks in `recv`. Before the fix the list was reaped with
`is_completed()`, which on gloo stays False until `wait()` is called, so nothing was freed;
the fix waits every outstanding Work at the start of the round. Run on 2 real gloo ranks,
the reap loop fails naming its isend line and its drain twin passes.
"""

import pytest
import torch
import torch.distributed as dist

ROUNDS = 200


class PPSync:
    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size
        self.work_list: list[dist.Work] = []

    def sync(self, count: int) -> int:
        """Take the previous stage's count, pass it on to the next stage."""
        if self.rank > 0:
            received = torch.zeros(1, dtype=torch.int64)
            dist.recv(received, src=self.rank - 1)
            count = int(received)
        if self.rank < self.world_size - 1:
            self.work_list.append(dist.isend(torch.tensor([count]), dst=self.rank + 1))
        return count

    def reap(self) -> None:
        """Before the fix: drop the prefix of Works that say they are completed."""
        while self.work_list and self.work_list[0].is_completed():
            self.work_list.pop(0)

    def drain(self) -> None:
        """The fix: wait every outstanding Work, then forget them."""
        for work in self.work_list:
            work.wait()
        self.work_list.clear()


@pytest.mark.hicache_ranks(2, max_live_works=4)
def test_pp_sync_reap(rank, world_size):
    pp = PPSync(rank, world_size)
    for round_index in range(ROUNDS):
        pp.sync(round_index)
        pp.reap()


@pytest.mark.hicache_ranks(2, max_live_works=4)
def test_pp_sync_drain(rank, world_size):
    pp = PPSync(rank, world_size)
    for round_index in range(ROUNDS):
        pp.drain()
        assert pp.sync(round_index) == round_index
    pp.drain()
