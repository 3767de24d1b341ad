"""A process whose main thread rebinds every container of Works it keeps, round after
round, while a census runs from another thread (as the agent's does); prints the census
as JSON, and a second one that walks the collector's lists a chunk at a time (as on a big
heap), the program rebinding all along. Each shape is a reaper the way programs write it: the container that held the
Works when the census took its snapshot is gone by the time it is named.

Run by test_census.py in a subprocess: `python rebinding.py N` with N Works per holder.
"""

import json
import sys
import threading

import torch
import torch.distributed as dist

from hicache_cli.attach import heap
from hicache_cli.attach.census import take_census
from hicache_cli.attach.walk import Walker

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def work():
    return dist.all_reduce(torch.ones(2), async_op=True)


class Pump:  # the incident's usual shape, a list comprehension each step
    def __init__(self, n):
        self.pending = [work() for _ in range(n)]

    def reap(self):
        self.pending = [w for w in self.pending if w is not None]


class Router:  # a dict of requests rebuilt each step (untracked by the collector: only Works in it)
    def __init__(self, n):
        self.inflight = {i: work() for i in range(n)}

    def reap(self):
        self.inflight = {k: w for k, w in self.inflight.items() if w is not None}


class Trainer:  # (Work, tensor) pairs: the tuples stay, the list around them is new each step
    def __init__(self, n):
        self.pending_log_sends = [(work(), torch.zeros(8)) for _ in range(n)]

    def reap(self):
        self.pending_log_sends = [p for p in self.pending_log_sends if p[0] is not None]


class Drainer:  # the twin that waits: each step a fresh list with this step's one Work
    def __init__(self):
        self.pending = [work()]

    def reap(self):
        for w in self.pending:
            w.wait()
        self.pending = [work()]


N = int(sys.argv[1])
work_list = [work() for _ in range(N)]
KEEP = [Pump(N), Router(N), Trainer(N), Drainer()]


def main():
    global work_list
    result = {}

    def census(key):
        result[key] = take_census(dist.Work, torch.Tensor, 0, 0, walker=Walker(chunk_s=0.001)).to_dict()

    for key in ("census", "walked"):
        heap.WHOLE_BELOW = 0 if key == "walked" else heap.WHOLE_BELOW
        thread = threading.Thread(target=census, args=(key,))
        thread.start()
        rounds = 0
        while thread.is_alive():
            for holder in KEEP:
                holder.reap()
            work_list = work_list[0:]  # the module-level reap loop's slicing
            rounds += 1
        result[f"{key}_rounds"] = rounds
    print(json.dumps(result))


main()
