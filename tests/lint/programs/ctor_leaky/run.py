"""Rank 0 sends four activations a round to rank 1: `torchrun --nproc-per-node 2 -m PACKAGE.run`."""

import torch
import torch.distributed as dist

from .pipeline import Pipeline


def main(rounds: int = 10, width: int = 8) -> None:
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        pipeline = Pipeline(peer=1)
        for _ in range(rounds):
            pipeline.round([torch.ones(width) for _ in range(4)])
        pipeline.settle()
    else:
        for _ in range(rounds * 4):
            dist.recv(torch.empty(width), 0)
    dist.barrier()


if __name__ == "__main__":
    main()
