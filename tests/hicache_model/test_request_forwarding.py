"""pp_sync.RequestForwarding on two real gloo ranks: the request passing of SGLang's PP loop
paces the first stage to the second, however much faster the first one's rounds are."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROUNDS = 150


def stage(rank: int, store: str, seen: Any, out: Any) -> None:
    import torch.distributed as dist

    from hicache_model.pp_sync import RequestForwarding, Topology, new_groups
    from hicache_model.work_list import WorkList

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    topo = Topology(rank=rank, pp_size=2, tp_size=1)
    status = WorkList()
    forwarding = RequestForwarding(topo, new_groups(topo).requests, status)
    ahead = 0
    for _ in range(ROUNDS):
        forwarding.forward(rank)
        if rank == 1:
            seen.value += 1  # this stage has taken one more round's requests
            time.sleep(0.004)  # a slow stage's round
        else:
            ahead = max(ahead, forwarding.forwarded - seen.value)  # a fast one: nothing else to do
    out.put((rank, ahead, forwarding.forwarded, status.blocked_on))
    dist.barrier()
    dist.destroy_process_group()


def test_the_first_stage_runs_at_most_a_round_ahead_of_the_second(tmp_path: Path) -> None:
    """Free-running, the first stage would be done with its 150 rounds before the second had
    taken ten; paced, it is never more than two of its rounds past the second's."""
    context = multiprocessing.get_context("spawn")
    seen, out = context.Value("i", 0), context.Queue()
    procs = [context.Process(target=stage, args=(r, str(tmp_path / "store"), seen, out)) for r in (0, 1)]
    for p in procs:
        p.start()
    results = {rank: rest for rank, *rest in (out.get(timeout=120) for _ in procs)}
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    ahead, forwarded, blocked_on = results[0]
    assert forwarded == ROUNDS and results[1][1] == 0  # the last stage forwards nothing
    assert 1 <= ahead <= 2
    assert blocked_on is None and results[1][2] is None  # neither is left saying it waits
