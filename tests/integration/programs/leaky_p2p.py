"""A pipeline-parallel "scheduler" that leaks its asynchronous sends.

Models the incident: every round, each rank but the last ``dist.isend``s a small
count tensor to the next rank and keeps the returned Work in ``Syncer.pending``.
A reaper then drops only the prefix of Works whose ``is_completed()`` is true;
on gloo an isend Work never reports completion unless someone calls ``wait()``,
so the list (and the tensors it pins) grows for as long as the program runs.
Every rank but the first blocks in ``dist.recv`` from the previous rank.

Run it on CPU with gloo, for example::

    torchrun --standalone --nproc-per-node 2 leaky_p2p.py --seconds 3

Rank 0 sets the pace (``--interval`` sleep per round) and, after ``--seconds``,
sends a stop flag down the chain; a barrier then makes sure every message was
received. Each rank prints one summary line (rounds, pending works). The
outstanding sends are deliberately never waited: by default the program leaves
with ``os._exit(0)``; ``--exit normal`` returns from ``main`` instead.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist


class Syncer:
    def __init__(self, rank: int, world_size: int):
        self.rank = rank
        self.world_size = world_size
        self.pending = []  # Works of in-flight sends

    def sync_counts(self, round_idx: int, stop: bool) -> bool:
        """Receive the upstream counts, forward ours downstream; return True when the pipeline is stopping."""
        if self.rank > 0:
            incoming = torch.zeros(2, dtype=torch.int64)
            dist.recv(incoming, src=self.rank - 1)
            stop = stop or bool(incoming[1])
        if self.rank < self.world_size - 1:
            counts = torch.tensor([round_idx, int(stop)], dtype=torch.int64)
            self.pending.append(dist.isend(counts.clone(), dst=self.rank + 1))
        return stop

    def reap(self) -> None:
        """Forget the sends that have finished (only a finished prefix, to keep order)."""
        done = 0
        while done < len(self.pending) and self.pending[done].is_completed():
            done += 1
        del self.pending[:done]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="how long to run")
    parser.add_argument("--interval", type=float, default=0.001, help="rank 0's sleep between rounds (s)")
    parser.add_argument("--exit", choices=["hard", "normal"], default="hard", help="os._exit(0), or return from main")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    syncer = Syncer(rank, world_size)

    deadline = time.monotonic() + args.seconds
    rounds = 0
    while True:
        # The first rank decides when to stop; the others follow the stop flag it
        # sends down the chain, so no one is left blocked in recv.
        stop = syncer.sync_counts(rounds, stop=rank == 0 and time.monotonic() >= deadline)
        syncer.reap()
        rounds += 1
        if stop:
            break
        if rank == 0:  # the first stage sets the pace; the others are paced by their recv
            time.sleep(args.interval)

    # Everyone has now received every message sent to it (the stop flag comes last),
    # so no sender leaves while a peer still reads from it.
    dist.barrier()
    # One write per line, so lines of different ranks do not interleave.
    print(f"rank {rank}/{world_size}: rounds={rounds} pending_works={len(syncer.pending)}\n", end="", flush=True)
    if args.exit == "hard":
        # Waiting the leaked sends (or tearing the group down under them) is what
        # this program never does; leave at once.
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
