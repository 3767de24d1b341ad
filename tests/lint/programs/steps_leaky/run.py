"""Two gloo ranks, a few steps: `torchrun --nproc-per-node 2 -m PACKAGE.run`."""

import torch.distributed as dist

from .driver import train


def main() -> None:
    dist.init_process_group("gloo")
    field = train(steps=20, rows=4, width=8)
    print(f"rank {dist.get_rank()}: field sum {float(field.sum())}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
