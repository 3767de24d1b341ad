"""A process that keeps real Works (a one-rank gloo group) in every shape the census names,
then takes a census from another thread (as the agent does) and prints it as JSON; then,
with the collector off, what of the census is still alive, and a second census; then one
with the collector's lists walked in chunks (as on a big heap), and one after gc.freeze()
(as a server does once warm: SGLang's /freeze_gc, vLLM at start-up).

Run by test_census.py in a subprocess: a process group is not something to start inside
pytest's own process.
"""

import collections
import gc
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


class Syncer:  # a list in an instance attribute (the incident's shape)
    def __init__(self, n):
        self.pending = [work() for _ in range(n)]


class Scheduler:  # a dict keyed by request id
    def __init__(self):
        self.pending = {i: work() for i in range(7)}


class Record:  # a record holding its Work beside a tensor
    def __init__(self):
        self.handle = work()
        self.buf = torch.zeros(256)


class Backend:  # records in a list
    def __init__(self):
        self.ongoing_reqs = [Record() for _ in range(5)]


class Slotted:
    __slots__ = ("work",)

    def __init__(self):
        self.work = work()


class Controller:  # two holders on one object: naming the first reads its __dict__ (3.11+ keeps it after)
    def __init__(self):
        self.work_list = [work() for _ in range(5)]
        self.ongoing = {i: work() for i in range(3)}


class Registry:  # a class attribute
    in_flight = [work() for _ in range(3)]


def make_sender():  # a closure variable
    works = []

    def send():
        works.append(work())

    return send


SEND = make_sender()
for _ in range(4):
    SEND()
QUEUE = collections.deque(work() for _ in range(6))  # a module global
INFLIGHT = [(work(), torch.zeros(100)) for _ in range(2)]  # (Work, tensor) pairs in a list
KEEP = [Syncer(int(sys.argv[1])), Scheduler(), Backend(), Slotted(), Controller()]


SENTINEL = [None]  # tracked, so in every census's snapshot: a snapshot kept alive keeps a reference to it
SENTINEL_REFS = sys.getrefcount(SENTINEL)


def left():
    """What of the census is still alive (the collector is off): its records, or its
    snapshot (untracked by the collector, so seen by the reference it holds to SENTINEL)."""
    ours = [type(o).__qualname__ for o in gc.get_objects() if type(o).__module__.startswith("hicache_cli.attach.")]
    kept = sys.getrefcount(SENTINEL) - SENTINEL_REFS
    return sorted(ours) + ([f"{kept} snapshot(s) holding every object"] if kept else [])


def main():
    pending = [work() for _ in range(9)]  # a local of a running function
    result = {}
    progress = [0]

    def census(key):
        walker = Walker(chunk_s=0.001, rest_s=0.001)
        result[key] = take_census(dist.Work, torch.Tensor, 0, 0, walker=walker).to_dict()

    gc.disable()  # what the census leaves behind is not collected meanwhile: a cycle would stay
    thread = threading.Thread(target=census, args=("census",))
    thread.start()
    while thread.is_alive():  # the main thread keeps running Python while the census walks
        progress[0] += 1
    result["main_thread_progress"] = progress[0]
    result["pending_len"] = len(pending)
    result["left_by_census"] = left()
    for key in ("census_again", "walked", "frozen"):
        if key == "walked":
            heap.WHOLE_BELOW = 0  # the old generation walked a chunk a hold, as past 0.25 M objects
        if key == "frozen":
            heap.WHOLE_BELOW = 250_000
            gc.freeze()  # every holder moves out of gc.get_objects()' sight
        again = threading.Thread(target=census, args=(key,))
        again.start()
        while again.is_alive():
            progress[0] += 1
        again.join()
        if key == "walked":
            result["left_by_walk"] = left()
    print(json.dumps(result))


main()
