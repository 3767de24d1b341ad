"""Two gloo ranks exchange every chunk's activations: `torchrun --nproc-per-node 2 -m PACKAGE.run`."""

import torch
import torch.distributed as dist

from .schedule import Iteration


def main(steps: int = 10, chunks: int = 2, width: int = 8) -> None:
    dist.init_process_group("gloo")
    iteration = Iteration(chunks, width, peer=1 - dist.get_rank())
    for _ in range(steps):
        for chunk in range(chunks):
            iteration.post_recv(chunk)
            iteration.post_send(chunk, torch.ones(width))
        for chunk in range(chunks):
            iteration.take_input(chunk)
            iteration.release_sent(chunk)
    held = sum(len(iteration.bufs.send_queue(chunk)) for chunk in range(chunks))
    print(f"rank {dist.get_rank()}: {held} sends held")
    dist.barrier()


if __name__ == "__main__":
    main()
