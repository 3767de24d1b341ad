"""Ship each step's statistics from a trainer (rank 0) to a monitor (rank 1).

Both sides post their transfers asynchronously and keep only the most recent
handles, ``deque(maxlen=64)``, so that a slow monitor never blocks training and
no list of handles grows: a handle that falls off the end is simply forgotten.
The monitor receives into a ring of 64 preallocated buffers and reads a buffer
when its slot comes round again.

``--wait-oldest`` is the careful version: before the deque drops a handle, the
handle is waited (``pending.popleft().wait()``), so at most 64 transfers are in
flight and the monitor reads only buffers that have arrived.

The trainer stops after ``--seconds`` and sends a last update with step -1; the
monitor stops when it reads it.

Run it on CPU with gloo, for example::

    torchrun --standalone --nproc-per-node 2 stats_ring.py --seconds 10
    torchrun --standalone --nproc-per-node 2 stats_ring.py --seconds 10 --wait-oldest
"""

import argparse
import collections
import os
import time

import torch
import torch.distributed as dist

DEPTH = 64


def trainer(seconds: float, wait_oldest: bool) -> int:
    pending = collections.deque(maxlen=DEPTH)
    weights = torch.randn(64, 64)
    deadline = time.monotonic() + seconds
    step = 0
    while True:
        done = time.monotonic() >= deadline
        weights = torch.tanh(weights @ weights.T / 64)  # the training step
        stats = torch.tensor([-1.0 if done else float(step), weights.abs().mean().item(), weights.std().item()])
        if wait_oldest and len(pending) == DEPTH:
            pending.popleft().wait()
        pending.append(dist.isend(stats, dst=1))
        if done:
            break
        step += 1
    if wait_oldest:
        for work in pending:
            work.wait()
    return step


def monitor(wait_oldest: bool) -> int:
    pending = collections.deque(maxlen=DEPTH)
    ring = [torch.zeros(3) for _ in range(DEPTH)]
    seen = 0
    slot = 0
    while True:
        if len(pending) == DEPTH:  # this slot's buffer comes round again: read it
            if wait_oldest:
                pending.popleft().wait()
            if ring[slot][0].item() < 0:
                break
            seen += 1
        pending.append(dist.irecv(ring[slot], src=0))
        slot = (slot + 1) % DEPTH
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--wait-oldest", action="store_true", help="wait each handle before the deque drops it")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        steps = trainer(args.seconds, args.wait_oldest)
        print(f"trainer: {steps} steps\n", end="", flush=True)
    else:
        seen = monitor(args.wait_oldest)
        print(f"monitor: {seen} updates read\n", end="", flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
