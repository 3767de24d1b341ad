"""Two gloo ranks run one overlapped attention: `torchrun --nproc-per-node 2 -m PACKAGE.run`."""

import torch
import torch.distributed as dist

from .attention import SeqParallelAttention


def main(steps: int = 5, tokens: int = 4, width: int = 8) -> None:
    dist.init_process_group("gloo")
    attention = SeqParallelAttention(dist.group.WORLD, overlap=True)
    for _ in range(steps):
        x = torch.randn(tokens, width)
        attention(x, x, x)
    print(f"rank {dist.get_rank()}: {len(attention.handles)} handles held")
    dist.barrier()


if __name__ == "__main__":
    main()
