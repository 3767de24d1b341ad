"""What a census costs the program when the leak's holder is already huge (a server that has
leaked for hours before anyone attached): the program's worst gap while the census counts it.

    .venv/bin/python scripts/census_big_holder.py --works 1000000 --holder list dict

A child process keeps N stand-in Works (a small class with is_completed(); a million real
gloo Works would take a gigabyte and minutes to make) in `Scheduler.pending` (a list) or
`Scheduler.inflight` (a dict by request id), takes one census from a thread as the agent
does, while its main thread sleeps 1 ms at a time; printed: what the census found, its
longest accounted hold, and the program's worst gap and the next three.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import os, sys, threading, time
from hicache_cli.attach.census import take_census


class Work:  # stands in for c10d.Work: the census looks for a type
    __slots__ = ()

    def is_completed(self):
        return False


class Scheduler:
    def __init__(self, n, holder):
        if holder == "list":
            self.pending = [Work() for _ in range(n)]
        else:
            self.inflight = {i: Work() for i in range(n)}


KEEP = Scheduler(int(sys.argv[1]), sys.argv[2])
taken = {}
thread = threading.Thread(target=lambda: taken.update(c=take_census(Work, None, os.getpid(), 0)))
thread.start()
gaps = []
while thread.is_alive():
    began = time.perf_counter()
    time.sleep(0.001)
    gaps.append(time.perf_counter() - began)
census = taken["c"]
top = sorted(gaps)[-4:][::-1]
print(f"{sys.argv[2]} of {int(sys.argv[1]):,}: found {[(h.path, h.works) for h in census.holders]}, longest hold "
      f"{census.cost.max_hold_s * 1000:.0f} ms, the program's worst gaps {[round(g * 1000) for g in top]} ms")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--works", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--holder", choices=["list", "dict"], nargs="+", default=["list", "dict"])
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for works in args.works:
        for holder in args.holder:
            done = subprocess.run([sys.executable, "-c", CHILD, str(works), holder], capture_output=True, text=True,
                                  env=env, check=False)  # fmt: skip
            print(done.stdout.strip() or f"failed: {done.stderr.strip()[-500:]}")


if __name__ == "__main__":
    main()
