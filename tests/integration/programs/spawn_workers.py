"""A well-behaved torch.distributed program launched by torch.multiprocessing.spawn.

No torchrun: the parent process spawns ``--world-size`` workers; each joins a
gloo group through a ``file://`` rendezvous in a temporary directory made by the
parent, then loops for ``--seconds`` doing a mix of

* ``dist.all_reduce(t, async_op=True)`` followed by ``.wait()``, and
* an ``isend``/``irecv`` ping-pong between ranks 0 and 1, both Works waited.

Every asynchronous Work is waited, so nothing accumulates. The all-reduce also
carries each rank's "time is up" vote, so all ranks stop after the same round.

Run it on CPU, for example::

    python spawn_workers.py --world-size 2 --seconds 3
"""

import argparse
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank: int, world_size: int, init_method: str, seconds: float) -> None:
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size)
    deadline = time.monotonic() + seconds
    rounds = 0
    while True:
        # [contribution, stop vote]: summed over ranks, so everyone sees the same votes.
        t = torch.tensor([float(rank + 1), float(time.monotonic() >= deadline)])
        dist.all_reduce(t, async_op=True).wait()
        assert t[0].item() == world_size * (world_size + 1) / 2
        if t[1].item() > 0:
            break

        if rank in (0, 1) and world_size > 1:
            peer = 1 - rank
            out = torch.full((4,), float(rounds))
            back = torch.empty(4)
            works = [dist.isend(out, dst=peer), dist.irecv(back, src=peer)]
            for work in works:
                work.wait()
            assert back[0].item() == rounds
        rounds += 1
        time.sleep(0.001)

    print(f"worker {rank}/{world_size} (pid {os.getpid()}): rounds={rounds}\n", end="", flush=True)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0, help="how long the workers loop")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="spawn_workers_") as tmp:
        init_method = f"file://{os.path.join(tmp, 'rendezvous')}"
        mp.spawn(worker, args=(args.world_size, init_method, args.seconds), nprocs=args.world_size, join=True)
    print(f"parent (pid {os.getpid()}): all {args.world_size} workers done", flush=True)


if __name__ == "__main__":
    main()
