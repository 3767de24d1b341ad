"""A small data-parallel trainer written the way a user writes one, whose leak starts after
warm-up: from ``--warmup-steps`` on, rank 0 ships its gradient norm to rank 1 each step with
``dist.isend`` and keeps the Work in ``GradNormExchange.pending``, which only ``flush()`` (at
the end of an epoch) waits - and an epoch is ``--steps-per-epoch`` steps, a billion by
default, as a service that trains on a stream never ends one. Rank 1 receives every norm.

    torchrun --standalone --nproc-per-node 2 gradnorm_trainer.py --warmup-steps 3000

Warm-up is counted in steps, the same on both ranks (a wall-clock warm-up lets one rank start
sending a step before the other starts receiving: a deadlock, not a leak). Prints a line when
warm-up ends. Runs until SIGTERM or the stop file (the ranks agree every 100 steps to stop).
"""

import argparse
import os
import signal
import time

import torch
import torch.distributed as dist


class GradNormExchange:
    def __init__(self):
        self.pending = []

    def send(self, value, peer):
        self.pending.append(dist.isend(value, dst=peer))

    def flush(self):
        for work in self.pending:
            work.wait()
        self.pending.clear()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--warmup-steps", type=int, default=3000)
    parser.add_argument("--steps-per-epoch", type=int, default=10**9)
    parser.add_argument("--stop-file", default=None)
    args = parser.parse_args()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    exchange = GradNormExchange()
    step = 0
    while True:
        if step % 100 == 0:  # the ranks agree on when to stop, or one would wait for the other forever
            asked = torch.tensor([float(bool(stop) or bool(args.stop_file and os.path.exists(args.stop_file)))])
            dist.all_reduce(asked, op=dist.ReduceOp.MAX)
            if asked.item():
                break
        loss = model(torch.randn(32, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        if step == args.warmup_steps and rank == 0:
            print(f"warm-up done at step {step}", flush=True)
        if step >= args.warmup_steps:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).reshape(1)
            if rank == 0:
                exchange.send(norm.clone(), 1)
            else:
                dist.recv(torch.empty(1), src=0)
        step += 1
        if step % args.steps_per_epoch == 0:
            exchange.flush()
        time.sleep(0.002)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
