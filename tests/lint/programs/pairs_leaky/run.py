"""Rank 0 streams a layer's activations to rank 1: `torchrun --nproc-per-node 2 -m PACKAGE.run`."""

import torch
import torch.distributed as dist

from .pool import BufferPool
from .stream import ActivationStream


def main(steps: int = 20, width: int = 8) -> None:
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        layer = torch.nn.Linear(width, width)
        stream = ActivationStream(peer=1)
        pool = BufferPool(stream, width)
        with torch.no_grad():
            for step in range(steps):
                buffer = pool.take()
                buffer.fill_(step)
                stream.push(layer(buffer))
        print(f"rank 0: {len(stream.in_flight)} sends held")
    else:
        for _ in range(steps):
            dist.recv(torch.empty(width), 0)
    dist.barrier()


if __name__ == "__main__":
    main()
