"""A torchrun job whose rank 0 hands a side task to two helper processes.

The helpers are started from a ``forkserver`` context and form a gloo group of
their own (a TCP rendezvous on a free port): helper 0 streams ``--messages``
tensors to helper 1, which receives them all; each send is waited. Meanwhile
the torchrun ranks wait for the side task at a barrier, then all-reduce a
result and finish. The helpers are ranks 0 and 1 of their world, as the
torchrun ranks are of theirs.

Run it on CPU with gloo, for example::

    torchrun --standalone --nproc-per-node 2 worker_world.py --messages 7485
"""

import argparse
import multiprocessing
import os
import socket

import torch
import torch.distributed as dist


def helper(rank: int, port: int, messages: int) -> None:
    # torchrun's workers would meet at its agent's store; this group meets at its own
    os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    buf = torch.zeros(8)
    for i in range(messages):
        if rank == 0:
            dist.isend(torch.full((8,), float(i)), dst=1).wait()
        else:
            dist.recv(buf, src=0)
    print(f"helper {rank}: {messages} messages\n", end="", flush=True)
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=7485)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        context = multiprocessing.get_context("forkserver")
        port = free_port()
        helpers = [context.Process(target=helper, args=(r, port, args.messages)) for r in (0, 1)]
        for p in helpers:
            p.start()
        for p in helpers:
            p.join()
    dist.barrier()
    result = torch.ones(1)
    dist.all_reduce(result)
    print(f"rank {dist.get_rank()}: {result.item():.0f}\n", end="", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
