"""A two-stage PP sync that waits last round's sends at the start of each round (the shape
of SGLang's fix for its HiCache leak), then exits when its rounds are done.

Rank 0 isends a count to rank 1 every round and keeps the Work in ``pending``;
at the start of the next round it waits everything in ``pending``. Rank 1
receives each count with a blocking ``dist.recv``. After ``--rounds`` rounds
both ranks return from ``main``: the last round's send is never waited.

Run it on CPU with gloo, for example::

    torchrun --standalone --nproc-per-node 2 drain_at_round_start.py --rounds 200
"""

import argparse

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    pending = []
    for step in range(args.rounds):
        for work in pending:
            work.wait()
        pending.clear()
        if rank == 0:
            pending.append(dist.isend(torch.tensor([step]), dst=1))
        else:
            count = torch.zeros(1, dtype=torch.int64)
            dist.recv(count, src=0)
    print(f"rank {rank}: {args.rounds} rounds\n", end="", flush=True)


if __name__ == "__main__":
    main()
