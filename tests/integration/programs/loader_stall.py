"""Data-parallel training whose input pipeline can die.

Each rank has a loader thread that puts batches on a queue; the training loop
takes a batch, computes a gradient and averages it over the ranks with a
blocking ``dist.all_reduce``. With ``--loader-dies-after N`` rank 1's loader
thread stops after N batches (an exception it swallows, a dead file handle):
rank 1 then waits on its queue for good, and rank 0 waits in the all-reduce
for rank 1. Without it both ranks train ``--steps`` steps and finish.

Run it on CPU with gloo, for example::

    torchrun --standalone --nproc-per-node 2 loader_stall.py --steps 3000 --loader-dies-after 500
    torchrun --standalone --nproc-per-node 2 loader_stall.py --steps 3000
"""

import argparse
import queue
import threading

import torch
import torch.distributed as dist


def loader(batches: queue.Queue, steps: int, dies_after: int) -> None:
    for i in range(steps):
        if dies_after and i == dies_after:
            return  # the worker died; nobody notices
        batches.put(torch.randn(16, 16))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--loader-dies-after", type=int, default=0, help="rank 1's loader stops after N batches")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    batches: queue.Queue = queue.Queue(maxsize=8)
    dies_after = args.loader_dies_after if rank == 1 else 0
    threading.Thread(target=loader, args=(batches, args.steps, dies_after), daemon=True).start()
    weights = torch.zeros(16)
    for _ in range(args.steps):
        batch = batches.get()
        grad = batch.mean(dim=0)
        dist.all_reduce(grad)
        weights -= 0.01 * grad / dist.get_world_size()
    print(f"rank {rank}: trained, |w| = {weights.norm().item():.3f}\n", end="", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
