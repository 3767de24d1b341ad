"""Rank 0 serves its state to rank 1 every step: `torchrun --nproc-per-node 2 -m PACKAGE.run`."""

import torch
import torch.distributed as dist

from .trainer import Trainer


def main(steps: int = 5, width: int = 8) -> None:
    dist.init_process_group("gloo")
    pg = dist.new_group(backend="gloo")
    trainer = Trainer(pg, width)
    for _ in range(steps):
        trainer.step(torch.ones(width))
        if dist.get_rank() == 0:
            trainer.serve(1)
        else:
            trainer.transport.recv_state(0, {"weight": trainer.weight})
    if dist.get_rank() == 0:
        print(f"rank 0: {trainer.transport.poll()} sends outstanding at the end")
    dist.barrier()


if __name__ == "__main__":
    main()
