"""A process with a large Python heap and never-waited Works, for `attach_cost.py census`.

    python scripts/attach_heap.py MILLIONS [freeze]

Builds about MILLIONS million objects the collector tracks (dicts, lists, tuples, as a
server's caches would), keeps 1000 Works of a one-rank gloo group in `Holder.works`, prints
`ready` (with `freeze`, after gc.freeze(), as a warm server does), then sleeps 1 ms at a
time forever, printing the time and the longest gap between two wake-ups of each 100
(seconds): what a GIL held elsewhere, or a stop, costs this program.
"""

import gc
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


class Holder:
    def __init__(self):
        # never waited on purpose: the census has Works to find
        works = [dist.all_reduce(torch.ones(1), async_op=True) for _ in range(1000)]  # hicache: ignore[HC001]
        self.works = works


HOLDER = Holder()
COUNT = int(float(sys.argv[1]) * 1e6) // 3
CACHE = [({"key": i}, [i], (i, str(i))) for i in range(COUNT)]  # 3 tracked objects each (the tuple too)
if sys.argv[2:] == ["freeze"]:
    gc.freeze()
print("ready", flush=True)
while True:
    worst = 0.0
    for _ in range(100):
        began = time.perf_counter()
        time.sleep(0.001)
        worst = max(worst, time.perf_counter() - began)
    print(f"{time.time():.3f} {worst:.6f}", flush=True)
