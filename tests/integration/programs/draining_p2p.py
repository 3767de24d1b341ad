"""The fixed twin of leaky_p2p.py: a pipeline-parallel "scheduler" that waits its sends.

Same shape as leaky_p2p.py: every round, each rank but the last ``dist.isend``s
a small count tensor to the next rank and keeps the Work in ``Syncer.pending``;
every rank but the first blocks in ``dist.recv`` from the previous rank. The
fix: at the start of each round, ``wait()`` every outstanding Work and clear the
list, so at most one send per rank is ever in flight.

Run it on CPU with gloo, for example::

    torchrun --standalone --nproc-per-node 2 draining_p2p.py --seconds 3

Rank 0 sets the pace (``--interval`` sleep per round) and, after ``--seconds``,
sends a stop flag down the chain. Each rank prints one summary line (rounds,
pending works) and the program exits normally.
"""

import argparse
import time

import torch
import torch.distributed as dist


class Syncer:
    def __init__(self, rank: int, world_size: int):
        self.rank = rank
        self.world_size = world_size
        self.pending = []  # Works of in-flight sends

    def drain(self) -> None:
        """Wait every send still in flight, then forget it."""
        for work in self.pending:
            work.wait()
        self.pending.clear()

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="how long to run")
    parser.add_argument("--interval", type=float, default=0.001, help="rank 0's sleep between rounds (s)")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    syncer = Syncer(rank, world_size)

    deadline = time.monotonic() + args.seconds
    rounds = 0
    while True:
        syncer.drain()  # the fix: last round's sends are done before we send again
        # The first rank decides when to stop; the others follow the stop flag it
        # sends down the chain, so no one is left blocked in recv.
        stop = syncer.sync_counts(rounds, stop=rank == 0 and time.monotonic() >= deadline)
        rounds += 1
        if stop:
            break
        if rank == 0:  # the first stage sets the pace; the others are paced by their recv
            time.sleep(args.interval)

    pending_at_end = len(syncer.pending)
    syncer.drain()
    dist.barrier()
    # One write per line, so lines of different ranks do not interleave.
    print(f"rank {rank}/{world_size}: rounds={rounds} pending_works={pending_at_end}\n", end="", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
