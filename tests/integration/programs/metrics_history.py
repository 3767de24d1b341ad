"""A two-rank training-like loop that keeps every step's metrics in memory.

Each step both ranks exchange a small gradient-like tensor (rank 0 sends with
``dist.isend`` and waits the handle, rank 1 receives with ``dist.recv``), then
append the step's metrics to a Python list that nothing ever trims: a history
kept for a plot at the end. Communication is well-behaved; memory still grows
by about a kilobyte per step.

Run it on CPU with gloo, for example::

    torchrun --standalone --nproc-per-node 2 metrics_history.py --seconds 10
"""

import argparse
import time

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--width", type=int, default=128, help="floats of metrics kept per step")
    parser.add_argument("--interval", type=float, default=0.0, help="rank 0's sleep per step (s): its compute")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    grad = torch.zeros(16)
    go = torch.ones(1)
    history = []
    step = 0
    deadline = time.monotonic() + args.seconds
    while True:
        if rank == 0:
            grad.fill_(step)
            dist.isend(grad, dst=1).wait()
            go[0] = float(time.monotonic() < deadline)
            if args.interval:
                time.sleep(args.interval)
        else:
            dist.recv(grad, src=0)
        dist.broadcast(go, src=0)  # rank 0's clock decides when every rank stops
        history.append([float(grad[0])] * args.width)  # every step's metrics, for the final plot
        step += 1
        if not go.item():
            break
    print(f"rank {rank}: {step} steps, {len(history)} entries kept\n", end="", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
