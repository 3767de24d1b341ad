"""The census's snapshot taken whole (one gc.get_objects() hold) or walked a chunk a hold
(hicache_cli/attach/heap.py), alternated in one process, each figure measured in one run.

    .venv/bin/python scripts/census_snapshot.py --millions 1 3 [--freeze] [--reps 3]

For each size a child process builds about N million tracked objects (dicts, lists, tuples,
as attach_heap.py does) and 1000 never-waited Works of a one-rank gloo group, optionally
freezes its heap (gc.freeze(), as SGLang's /freeze_gc does), then takes `--reps` censuses
each way from a thread, as the agent does, while its main thread sleeps 1 ms at a time and
measures its longest gap. Printed per way (median of the reps, then the range): the census's
CPU, the GIL held taking the snapshot, the longest single hold, the program's worst gap, and
what the census found. A frozen heap has only the walked way: one hold does not see it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import gc, json, os, sys, threading, time
import torch, torch.distributed as dist
from hicache_cli.attach import heap
from hicache_cli.attach.census import take_census

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


class Holder:
    def __init__(self):
        self.works = [dist.all_reduce(torch.ones(1), async_op=True) for _ in range(1000)]  # hicache: ignore[HC001]


HOLDER = Holder()
millions, freeze, reps = float(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3])
CACHE = [({"key": i}, [i], (i, str(i))) for i in range(int(millions * 1e6) // 3)]
if freeze:
    gc.freeze()
ways = {"walked": 0} if freeze else {"one hold": 10**12, "walked": 0}
taken = {}


def census(way):
    taken[way] = take_census(dist.Work, torch.Tensor, os.getpid(), 0)


for _ in range(reps):
    for way, whole_below in ways.items():
        heap.WHOLE_BELOW = whole_below
        thread = threading.Thread(target=census, args=(way,))
        thread.start()
        worst = 0.0
        while thread.is_alive():
            began = time.perf_counter()
            time.sleep(0.001)
            worst = max(worst, time.perf_counter() - began)
        cost, top = taken[way].cost, taken[way].holders[0]
        print(json.dumps({"way": way, "objects": cost.objects, "frozen": cost.frozen, "cpu_s": cost.cpu_s,
                          "snapshot_s": cost.snapshot_s, "max_hold_s": cost.max_hold_s, "gap_s": worst,
                          "found": f"{top.path}: {top.works}"}), flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--millions", type=float, nargs="+", default=[1.0, 3.0])
    parser.add_argument("--freeze", action="store_true", help="the process freezes its heap once built")
    parser.add_argument("--reps", type=int, default=3, help="censuses each way")
    args = parser.parse_args()
    for millions in args.millions:
        done = subprocess.run([sys.executable, "-c", CHILD, str(millions), str(int(args.freeze)), str(args.reps)],
                              capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)),
                              check=False)  # fmt: skip
        rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not rows:
            sys.exit(f"the process with {millions} M objects failed: {done.stderr.strip()[-500:]}")
        for way in dict.fromkeys(r["way"] for r in rows):
            mine = [r for r in rows if r["way"] == way]

            def ms(key: str, mine: list[dict] = mine) -> str:
                values = sorted(r[key] * 1000 for r in mine)
                return f"{statistics.median(values):.0f} ms [{values[0]:.0f}-{values[-1]:.0f}]"

            first = mine[0]
            print(f"{first['objects'] / 1e6:.2f} M objects ({first['frozen'] / 1e6:.2f} M frozen), {way:8s}: "
                  f"census CPU {ms('cpu_s')}, snapshot held {ms('snapshot_s')}, longest hold {ms('max_hold_s')}, "
                  f"the program's worst gap {ms('gap_s')}; found {first['found']}")  # fmt: skip


if __name__ == "__main__":
    main()
