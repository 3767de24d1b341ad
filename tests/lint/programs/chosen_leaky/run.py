"""Two gloo ranks, batched exchange: `torchrun --nproc-per-node 2 -m PACKAGE.run`."""

import torch
import torch.distributed as dist

from .schedule import ForwardSchedule


def main(microbatches: int = 20, width: int = 8) -> None:
    dist.init_process_group("gloo")
    schedule = ForwardSchedule(dist.get_rank(), dist.get_world_size(), width, batch_p2p=True)
    for _ in range(microbatches):
        schedule.run_microbatch(torch.ones(width))
    print(f"rank {dist.get_rank()}: {len(schedule.outstanding)} requests held")
    dist.barrier()


if __name__ == "__main__":
    main()
