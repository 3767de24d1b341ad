"""Stream per-step telemetry from rank 0 to a collector on rank 1.

Rank 0 runs a fast loop and ships a small tensor of stats every step with
``dist.isend``. To avoid holding on to a handle per message it keeps only the
last few in a ``deque(maxlen=8)`` and never waits them: old handles simply fall
off the end. Rank 1 is the collector: it opens its sink (``--setup-s``), then
receives each update with a blocking ``dist.recv`` and writes it to the sink, which
takes a while (``--work-ms``), so it is slower than the sender.

On gloo that is worse than slow: a send whose handle is released before the
receiver has posted its receive is lost. The collector is still opening its
sink when the first handles fall off the deque, so it waits for a lost update
for good, and everything sent after it piles up in the sender's transport.

With ``--ack-every N`` the stream is flow-controlled: rank 1 sends a one-element
ack after every N updates it received, and rank 0 blocks on that ack after every
N updates it sent (the same unwaited deque otherwise, which then never drops a
handle before its update is received); at the end rank 0 sends a stop update and
both leave together.

Run it on CPU with gloo, for example::

    torchrun --standalone --nproc-per-node 2 telemetry_stream.py --seconds 10
    torchrun --standalone --nproc-per-node 2 telemetry_stream.py --seconds 10 --ack-every 8

Without flow control both ranks stop after ``--seconds`` and leave with
``os._exit(0)``: updates still in flight at that point are of no interest to
anyone (a collector still waiting for one sees the connection close).
"""

import argparse
import collections
import os
import time

import torch
import torch.distributed as dist


def sender(deadline: float, ack_every: int) -> int:
    recent = collections.deque(maxlen=8)
    stats = torch.zeros(8)
    ack = torch.zeros(1)
    step = 0
    while time.monotonic() < deadline:
        stats[0] = step
        stats[1] = time.monotonic()
        recent.append(dist.isend(stats.clone(), dst=1))
        step += 1
        if ack_every and step % ack_every == 0:
            dist.recv(ack, src=1)
    if ack_every:  # tell the collector we are done, and wait until it has it
        stats[2] = -1
        dist.send(stats, dst=1)
    return step


def collector(deadline: float, ack_every: int, work_s: float, setup_s: float) -> int:
    time.sleep(setup_s)  # open the sink
    update = torch.zeros(8)
    ack = torch.ones(1)
    totals = collections.Counter()
    received = 0
    while ack_every or time.monotonic() < deadline:
        dist.recv(update, src=0)
        if update[2] < 0:  # the sender's last word
            break
        received += 1
        totals[int(update[0]) % 16] += 1
        time.sleep(work_s)  # write it to the sink, which takes a while
        if ack_every and received % ack_every == 0:
            dist.send(ack, dst=0)
    return received


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--ack-every", type=int, default=0, help="flow control: ack every N updates (0: none)")
    parser.add_argument("--work-ms", type=float, default=0.5, help="the collector's time per update")
    parser.add_argument("--setup-s", type=float, default=0.5, help="the collector's time to open its sink")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    deadline = time.monotonic() + args.seconds
    if rank == 0:
        count = sender(deadline, args.ack_every)
        print(f"rank 0 sent {count} updates\n", end="", flush=True)
    else:
        count = collector(deadline, args.ack_every, args.work_ms / 1000.0, args.setup_s)
        print(f"rank 1 received {count} updates\n", end="", flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
