"""Two gloo ranks, a few microbatches: `torchrun --nproc-per-node 2 -m PACKAGE.run`."""

import torch
import torch.distributed as dist

from .stage import Stage


def main(microbatches: int = 20, width: int = 16) -> None:
    dist.init_process_group("gloo")
    stage = Stage(dist.get_rank(), dist.get_world_size(), width)
    for _ in range(microbatches):
        stage.step(torch.ones(width))
    print(f"rank {dist.get_rank()}: {len(stage.pending_sends)} send Works held")
    dist.barrier()


if __name__ == "__main__":
    main()
