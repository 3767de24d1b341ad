"""A two-stage log shipper whose reaper rebuilds its list of in-flight sends.

Stage 0 ships a small record to stage 1 every step with ``dist.isend`` and keeps the
Work in ``Shipper.pending``; after each step it keeps only the Works that are not done
yet, the way people usually write it::

    self.pending = [w for w in self.pending if not w.is_completed()]

On gloo a send's Work says ``is_completed() == False`` until someone calls ``wait()``,
so the list is rebuilt every step and never shrinks. ``--drain`` waits the previous
step's sends before shipping (the fix); the list then holds at most one.

``--ballast N`` makes stage 0 keep N small objects alive first (a big application's heap:
caches, configs, parsed requests), so that process tracks millions of objects.

    torchrun --standalone --nproc-per-node 2 rebuilt_reaper.py --stop-file /tmp/stop

Each rank prints ``rank R/W: serving`` once its group is up; when the stop file appears,
stage 0 sends a stop flag and both print how many steps they ran.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist


class Shipper:
    def __init__(self, drain: bool):
        self.drain = drain
        self.pending = []

    def ship(self, step: int, stop: bool) -> None:
        if self.drain:
            for work in self.pending:
                work.wait()
            self.pending = []
        record = torch.tensor([step, int(stop)], dtype=torch.int64)
        self.pending.append(dist.isend(record, dst=1))
        self.pending = [w for w in self.pending if not w.is_completed()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stop-file", required=True)
    parser.add_argument("--drain", action="store_true")
    parser.add_argument("--ballast", type=int, default=0, help="small objects stage 0 keeps alive")
    parser.add_argument("--interval", type=float, default=0.002)
    args = parser.parse_args()

    stage0 = os.environ.get("RANK", "0") == "0"
    ballast = [{"id": i, "tags": [i]} for i in range(args.ballast // 2 if stage0 else 0)]  # a dict and a list each
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}/{world}: serving\n", end="", flush=True)

    shipper = Shipper(args.drain)
    steps = 0
    while True:
        if rank == 0:
            stop = os.path.exists(args.stop_file)
            shipper.ship(steps, stop)
            time.sleep(args.interval)
        else:
            record = torch.zeros(2, dtype=torch.int64)
            dist.recv(record, src=0)
            stop = bool(record[1])
        steps += 1
        if stop:
            break

    dist.barrier()
    print(f"rank {rank}/{world}: stopped after {steps} steps, {len(ballast)} kept\n", end="", flush=True)
    if not args.drain:
        os._exit(0)  # the shipped Works were never waited: leave without tearing the group down
    for work in shipper.pending:
        work.wait()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
