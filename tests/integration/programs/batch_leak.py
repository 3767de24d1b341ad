"""Paired ranks that exchange with batch_isend_irecv and keep the send Works.

Every round, ranks 0 and 1 (and 2 and 3, ...) swap a small tensor with
``dist.batch_isend_irecv([P2POp(isend, ...), P2POp(irecv, ...)])``. Each rank
waits the receive it needs, but only *keeps* the send Works in ``self.sent``,
reaping the prefix whose ``is_completed()`` is true. On gloo an unwaited send
never reports completion, so the send Works pile up for the whole run.

Run it on CPU with gloo, for example::

    torchrun --standalone --nproc-per-node 2 batch_leak.py --seconds 3

The even rank of each pair decides when to stop and tells its peer in the
payload. Each rank prints one summary line (rounds, kept send works), then
returns normally (``--exit hard`` leaves with ``os._exit(0)`` instead).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist


class Exchanger:
    def __init__(self, rank: int, peer: int):
        self.rank = rank
        self.peer = peer
        self.sent = []  # send Works, never waited

    def exchange(self, round_idx: int, stop: bool) -> bool:
        """Swap [round, stop] with the peer; return True once either side wants to stop."""
        out = torch.tensor([round_idx, int(stop)], dtype=torch.int64)
        inbox = torch.zeros(2, dtype=torch.int64)
        ops = [dist.P2POp(dist.isend, out, self.peer), dist.P2POp(dist.irecv, inbox, self.peer)]
        send_work, recv_work = dist.batch_isend_irecv(ops)  # gloo: one Work per op, in order
        recv_work.wait()  # we need the peer's data
        self.sent.append(send_work)  # ... but nobody waits the send
        while self.sent and self.sent[0].is_completed():
            self.sent.pop(0)
        return stop or bool(inbox[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="how long to run")
    parser.add_argument("--interval", type=float, default=0.001, help="sleep between rounds (s)")
    parser.add_argument("--exit", choices=["hard", "normal"], default="normal", help="os._exit(0), or return from main")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    peer = rank ^ 1  # pairs (0, 1), (2, 3), ...; an odd last rank just waits at the barrier
    rounds, kept = 0, 0
    if peer < world_size:
        exchanger = Exchanger(rank, peer)
        deadline = time.monotonic() + args.seconds
        while not exchanger.exchange(rounds, stop=rank % 2 == 0 and time.monotonic() >= deadline):
            rounds += 1
            time.sleep(args.interval)
        rounds += 1
        kept = len(exchanger.sent)

    dist.barrier()  # every message was received: each round's recv was waited
    print(f"rank {rank}/{world_size}: rounds={rounds} kept_send_works={kept}\n", end="", flush=True)
    if args.exit == "hard":
        os._exit(0)


if __name__ == "__main__":
    main()
