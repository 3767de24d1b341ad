"""A tight P2P loop for measuring what `hicache trace` costs a program: rank 0 waits last
round's send and isends one small tensor a round, rank 1 receives it. One message a round,
nothing else; rank 0 sets the pace and, after --seconds, sends the stop flag.

    torchrun --standalone --nproc-per-node 2 scripts/tight_p2p.py --seconds 5

Prints `rounds=N seconds=S rate=R` on rank 0.
"""

import argparse
import time

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    message = torch.zeros(2, dtype=torch.int64)
    rounds, pending = 0, None
    dist.barrier()
    started = time.perf_counter()
    while True:
        if rank == 0:
            stop = time.perf_counter() - started >= args.seconds
            if pending is not None:
                pending.wait()
            message[0], message[1] = rounds, int(stop)
            pending = dist.isend(message.clone(), dst=1)
        else:
            dist.recv(message, src=0)
            stop = bool(message[1])
        rounds += 1
        if stop:
            break
    elapsed = time.perf_counter() - started
    if pending is not None:
        pending.wait()
    dist.barrier()
    if rank == 0:
        print(f"rounds={rounds} seconds={elapsed:.3f} rate={rounds / elapsed:.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
