"""Run the scheduler on two gloo ranks for a few rounds: `torchrun --nproc-per-node 2 -m PACKAGE.run`."""

import torch.distributed as dist

from .scheduler import PipelineScheduler


def main(rounds: int = 20) -> None:
    dist.init_process_group("gloo")
    scheduler = PipelineScheduler(dist.get_rank(), dist.get_world_size())
    for step in range(rounds):
        scheduler.step({"step": step})
    print(f"rank {dist.get_rank()}: {len(scheduler.pending_sends)} send Works held")
    dist.barrier()


if __name__ == "__main__":
    main()
