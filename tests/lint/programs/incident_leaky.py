"""The HiCache PP-sync leak in 25 lines: `torchrun --nproc-per-node 2 incident_leaky.py`."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
work_list = []
rounds, c = 0, 0
while rounds < 2000:
    count = torch.tensor([rounds], dtype=torch.int64)
    if rank > 0:
        dist.recv(count, rank - 1)
    if rank < world - 1:
        work_list.append(dist.isend(count.clone(), rank + 1))
    while c < len(work_list) and work_list[c].is_completed():
        c += 1
    work_list = work_list[c:]
    c = 0
    rounds += 1
print(f"rank {rank}: {len(work_list)} send Works held after {rounds} rounds")
dist.barrier()
dist.destroy_process_group()
