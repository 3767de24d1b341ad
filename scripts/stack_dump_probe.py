"""Is asking a rank for its stacks safe? A fact the stack dumps are built on (hicache_cli/stacks.py).

Two gloo ranks: rank 0 blocks in `dist.recv` with a sampling thread beside it (as hicache's
probe samples), rank 1 sleeps. Rank 0 is asked for every thread's stack `--asks` times,
either by faulthandler's SIGUSR1 dump (`register(all_threads=True)`: read from C without the
GIL) or through hicache's FIFO (a thread of its own writes them holding the GIL). Prints how
many asks each way took before the rank died, if it did.

    .venv/bin/python scripts/stack_dump_probe.py --asks 3000
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

RANK = r"""
import os, sys, threading, time
from pathlib import Path
import torch, torch.distributed as dist
from hicache_cli import stacks
rank, dump = int(os.environ["RANK"]), Path(sys.argv[1])
if rank == 0:
    stacks.arm(dump)
    def sample():  # what a sampler does: read /proc, build a record, sleep
        while True:
            stat = Path("/proc/self/stat").read_text().split()
            record = {"utime": int(stat[13]), "threads": threading.active_count(), "t": time.time()}
            str(record)
            time.sleep(0.001)
    threading.Thread(target=sample, daemon=True).start()
dist.init_process_group("gloo")
print("ready", flush=True)
if rank == 0:
    dist.recv(torch.zeros(1), src=1)  # never sent
else:
    time.sleep(3600)
"""


def trial(how: str, asks: int, spacing_s: float) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2",
               "PYTHONPATH": str(REPO)}  # fmt: skip
        dump = Path(tmp) / "rank-0.stacks.txt"
        procs = [subprocess.Popen([sys.executable, "-c", RANK, str(dump)], env={**env, "RANK": str(r)},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for r in (0, 1)]  # fmt: skip
        try:
            for p in procs:
                assert p.stdout is not None and p.stdout.readline().strip() == b"ready", p.stderr
            time.sleep(0.5)
            from hicache_cli import stacks

            for i in range(asks):
                if procs[0].poll() is not None:
                    return f"rank 0 died ({procs[0].returncode}) after {i} asks"
                if how == "fifo":
                    if not stacks.ask(dump):
                        return f"the FIFO went unanswered after {i} asks"
                else:
                    os.kill(procs[0].pid, stacks.SIGNAL)
                time.sleep(spacing_s)
            time.sleep(0.5)
            if procs[0].poll() is not None:
                return f"rank 0 died ({procs[0].returncode}) after {asks} asks"
            dumps = dump.read_text().count("in <module>")
            return f"survived {asks} asks ({dumps} dumps of the main thread written)"
        finally:
            for p in procs:
                p.kill()
                p.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asks", type=int, default=3000)
    parser.add_argument("--spacing", type=float, default=0.003, help="seconds between asks")
    parser.add_argument("--trials", type=int, default=1)
    args = parser.parse_args()
    for how in ("signal", "fifo"):
        for n in range(args.trials):
            print(f"{how:<6} trial {n + 1}: {trial(how, args.asks, args.spacing)}", flush=True)


if __name__ == "__main__":
    main()
