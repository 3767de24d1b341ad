"""Each rank gathers every rank's step statistics without blocking the step, and ships a
heartbeat to its neighbour, keeping the handles to look at later.

Per step: ``dist.all_gather_into_tensor(..., async_op=True)`` of the step's stats,
``dist.reduce_scatter_tensor(..., async_op=True)`` of a gradient-like buffer, and a
heartbeat ``isend`` through the team's ``comm_helpers`` (a logging decorator). The handles
go into ``Stats.inflight`` and are never waited: the program only looks at the gathered
tensors now and then. ``--wait`` waits each handle at the end of its step (the twin that
drains).

    torchrun --standalone --nproc-per-node 2 stats_gather.py --stop-file /tmp/stop
"""

import argparse
import os
import time

import comm_helpers
import torch
import torch.distributed as dist


class Stats:
    def __init__(self, rank, world):
        self.rank, self.world = rank, world
        self.inflight = []

    def step(self, step):
        mine = torch.tensor([float(step), float(self.rank)])
        gathered = torch.zeros(2 * self.world)
        self.inflight.append(dist.all_gather_into_tensor(gathered, mine, async_op=True))
        grads = torch.ones(4 * self.world)
        shard = torch.zeros(4)
        self.inflight.append(dist.reduce_scatter_tensor(shard, grads, async_op=True))
        beat = torch.tensor([step])
        peer = (self.rank + 1) % self.world
        self.inflight.append(comm_helpers.isend(beat, dst=peer))
        dist.recv(torch.zeros(1, dtype=beat.dtype), src=(self.rank - 1) % self.world)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stop-file", required=True)
    parser.add_argument("--wait", action="store_true")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    stats = Stats(rank, world)
    print(f"rank {rank}/{world}: serving", flush=True)
    step = 0
    while True:
        stop = torch.tensor([int(os.path.exists(args.stop_file))])
        dist.broadcast(stop, src=0)
        if stop.item():
            break
        stats.step(step)
        if args.wait:
            for handle in stats.inflight:
                handle.wait()
            stats.inflight.clear()
        step += 1
        time.sleep(0.005)
    print(f"rank {rank}/{world}: {step} steps, {len(stats.inflight)} handles kept", flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
