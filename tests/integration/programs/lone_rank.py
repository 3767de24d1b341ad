"""A one-rank gloo service that keeps every async all_reduce Work it starts (a leak), until
its stop file appears. Written as a user writes a quick service: a module-level list, a
loop, a sleep. `--block` instead parks the main thread in one long C call (time.sleep)
after the group is up, so no injected code can run there; `--heap N` first builds N small
objects that a census must walk. `--abort-at-exit`: once it has left, the process aborts as
its interpreter finalizes (a module-level object's __del__ calls os.abort()) - a stand-in,
certain every run, for torch's gloo exit race, which aborts about 1 run in 4 of a trainer that
leaves its process group up (docs/attach.md) and cannot be made to happen on demand;
`--leave-group-up`: it exits without destroying its process group, as many trainers do.

    python lone_rank.py --stop-file /tmp/stop [--block] [--heap 3000000] [--abort-at-exit] [--leave-group-up]
"""

import argparse
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--stop-file", required=True)
parser.add_argument("--block", action="store_true")
parser.add_argument("--heap", type=int, default=0)
parser.add_argument("--abort-at-exit", action="store_true")
parser.add_argument("--leave-group-up", action="store_true")
args = parser.parse_args()


class AbortWhenFinalized:
    def __del__(self):
        os.abort()


if args.abort_at_exit:
    finalized = AbortWhenFinalized()  # a module global: let go of as the interpreter finalizes

store = os.path.join(tempfile.mkdtemp(), "store")
dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
ballast = [[i] for i in range(args.heap)]
pending = []
print(f"rank 0/1: serving (pid {os.getpid()})", flush=True)
if args.block:
    time.sleep(600)
rounds = 0
while not os.path.exists(args.stop_file):
    pending.append(dist.all_reduce(torch.ones(4), async_op=True))
    rounds += 1
    time.sleep(0.01)
print(f"rank 0/1: stopped after {rounds > 0} rounds, {len(pending) == rounds} kept", flush=True)
if not args.leave_group_up:
    dist.destroy_process_group()
sys.exit(0)
