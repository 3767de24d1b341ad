"""A pipeline-parallel server loop that runs until it is told to stop.

Every round, each stage but the last ``dist.isend``s its round's counts to the next stage
and keeps the Work in ``Scheduler.sync_works``; every stage but the first blocks in
``dist.recv`` from the previous one. With ``--policy reap`` (the incident's code) the
scheduler only drops the prefix of Works whose ``is_completed()`` is true - on gloo that
never happens without ``wait()``, so the list grows for as long as the server runs. With
``--policy drain`` (the fix) it waits every outstanding Work at the start of the round.

Run it on CPU with gloo::

    torchrun --standalone --nproc-per-node 2 serving_p2p.py --stop-file /tmp/stop

Each rank prints ``rank R/W: serving`` once its process group is up. When the stop file
appears, the first stage sends a stop flag down the chain and every rank prints one line
of invariants that do not depend on how long it ran.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist


class Scheduler:
    def __init__(self, rank: int, world_size: int, policy: str):
        self.rank = rank
        self.world_size = world_size
        self.policy = policy
        self.sync_works = []  # Works of the sends still in flight
        self.in_order = True

    def drain(self) -> None:
        for work in self.sync_works:
            work.wait()
        self.sync_works.clear()

    def reap(self) -> None:
        done = 0
        while done < len(self.sync_works) and self.sync_works[done].is_completed():
            done += 1
        del self.sync_works[:done]

    def sync_counts(self, round_idx: int, stop: bool) -> bool:
        if self.policy == "drain":
            self.drain()
        if self.rank > 0:
            incoming = torch.zeros(2, dtype=torch.int64)
            dist.recv(incoming, src=self.rank - 1)
            self.in_order = self.in_order and int(incoming[0]) == round_idx
            stop = stop or bool(incoming[1])
        if self.rank < self.world_size - 1:
            counts = torch.tensor([round_idx, int(stop)], dtype=torch.int64)
            self.sync_works.append(dist.isend(counts.clone(), dst=self.rank + 1))
        if self.policy == "reap":
            self.reap()
        return stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", choices=["reap", "drain"], default="reap")
    parser.add_argument("--stop-file", required=True, help="the server stops once this file exists")
    parser.add_argument("--interval", type=float, default=0.002, help="the first stage's pause between rounds (s)")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    scheduler = Scheduler(rank, world_size, args.policy)
    print(f"rank {rank}/{world_size}: serving\n", end="", flush=True)

    rounds = 0
    while True:
        stop = scheduler.sync_counts(rounds, stop=rank == 0 and os.path.exists(args.stop_file))
        rounds += 1
        if stop:
            break
        if rank == 0:
            time.sleep(args.interval)

    dist.barrier()
    if rank < world_size - 1:
        held = len(scheduler.sync_works)
        kept = held == rounds if args.policy == "reap" else held <= 1
        facts = f"sends kept as expected: {kept}"
    else:
        facts = f"received in order: {scheduler.in_order}"
    print(f"rank {rank}/{world_size}: stopped; {facts}\n", end="", flush=True)
    if args.policy == "reap":
        os._exit(0)  # the leaked sends are never waited: leave without tearing the group down
    scheduler.drain()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
