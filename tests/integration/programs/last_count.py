"""Forward a count to the next pipeline stage every round, waiting last round's send first.

Rank 0 sends its count each round with ``dist.isend`` and, as SGLang's fixed
HiCache does, waits the previous round's send at the start of the next round.
Rank 1 receives each count with ``dist.recv`` and acknowledges the last one, so
rank 0 knows everything arrived before it returns. Its last send's handle is
never waited: the ack already proves it was received.

``--wait-last`` also waits the last send before returning.

Run it on CPU with gloo, for example::

    torchrun --standalone --nproc-per-node 2 last_count.py --rounds 400
    torchrun --standalone --nproc-per-node 2 last_count.py --rounds 400 --wait-last
"""

import argparse
import time

import torch
import torch.distributed as dist


def first_stage(rounds: int, wait_last: bool) -> None:
    pending = None
    for i in range(rounds):
        if pending is not None:
            pending.wait()
        pending = dist.isend(torch.tensor([i]), dst=1)
        time.sleep(0.005)  # the round's own work
    dist.recv(torch.zeros(1, dtype=torch.int64), src=1)  # everything arrived
    if wait_last:
        pending.wait()


def second_stage(rounds: int) -> int:
    count = torch.zeros(1, dtype=torch.int64)
    total = 0
    for _ in range(rounds):
        dist.recv(count, src=0)
        total += int(count.item())
    dist.send(torch.ones(1, dtype=torch.int64), dst=0)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--wait-last", action="store_true", help="wait the last round's send before returning")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        first_stage(args.rounds, args.wait_last)
        print("stage 0: done\n", end="", flush=True)
    else:
        print(f"stage 1: total {second_stage(args.rounds)}\n", end="", flush=True)


if __name__ == "__main__":
    main()
