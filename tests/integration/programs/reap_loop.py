"""A 40-line reap loop at module level, as quick scripts are written.

Rank 0 sends a count to rank 1 each round and keeps the Work in ``work_list``; then it
cuts the completed prefix off by slicing, which makes a new list every round::

    work_list = work_list[c:]

With ``--wait`` it waits each Work before it cuts it (the list stays short).

    torchrun --standalone --nproc-per-node 2 reap_loop.py --stop-file /tmp/stop
"""

import argparse
import os
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--stop-file", required=True)
parser.add_argument("--wait", action="store_true")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank}/2: serving\n", end="", flush=True)  # one write: the ranks share a terminal
work_list = []
rounds = 0
stop = False
while not stop:
    if rank == 0:
        stop = os.path.exists(args.stop_file)
        work_list.append(dist.isend(torch.tensor([rounds, int(stop)]), dst=1))
        if args.wait:
            work_list[0].wait()
        c = 0
        while c < len(work_list) and work_list[c].is_completed():
            c += 1
        work_list = work_list[c:]
        time.sleep(0.002)
    else:
        got = torch.zeros(2, dtype=torch.int64)
        dist.recv(got, src=0)
        stop = bool(got[1])
    rounds += 1
dist.barrier()
print(f"rank {rank}/2: stopped after {rounds} rounds\n", end="", flush=True)
os._exit(0)
