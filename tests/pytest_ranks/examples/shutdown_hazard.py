"""A PP sync that drains at the start of each round (the shape of SGLang's fix), as a marked
test: every round's sends are waited at the start of the next, so the list never grows; but
the last round's isend is never waited when the body returns. On gloo a send whose Work is
dropped unwaited may never be delivered, and the next stage then waits in `recv` for it.
The plugin fails such a test every time, at once, naming the isend's line (and the recv the
peer is stuck in, when it is); a test that means it says so with allow_unwaited_sends=True.
"""

import pytest
import torch
import torch.distributed as dist

ROUNDS = 50
KEPT = []  # Works kept past the body, by the test that allows it


def sync_rounds(rank: int) -> list:
    pending = []
    for step in range(ROUNDS):
        for work in pending:  # the fix: drain at the start of the round
            work.wait()
        pending.clear()
        if rank == 0:
            pending.append(dist.isend(torch.tensor([step]), dst=1))
        else:
            got = torch.zeros(1, dtype=torch.int64)
            dist.recv(got, src=0)
            assert int(got) == step
    return pending


@pytest.mark.parametrize("attempt", range(3))
@pytest.mark.hicache_ranks(2)
def test_drain_at_round_start(rank, world_size, attempt):
    sync_rounds(rank)


@pytest.mark.hicache_ranks(2, allow_unwaited_sends=True)
def test_a_send_kept_past_the_body_is_allowed_when_said(rank, world_size):
    KEPT.extend(sync_rounds(rank))  # still held (and so delivered) when the body returns
