"""Two gloo ranks exchanging a tensor every step. `torchrun --nproc-per-node 2 -m PACKAGE.run`."""

import torch.distributed as dist

from .pipeline import Pipeline
from .schedule import run_steps


def main(steps: int = 20) -> None:
    dist.init_process_group("gloo")
    pipeline = Pipeline()
    run_steps(pipeline, steps, peer=1 - dist.get_rank())
    print(f"rank {dist.get_rank()}: {len(pipeline.pending)} steps still held")
    dist.barrier()


if __name__ == "__main__":
    main()
