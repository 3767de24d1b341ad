"""Run a script written for torchrun on N local ranks forked from this process.

Some users launch single-node jobs this way rather than with torchrun: one process imports
torch once and ``torch.multiprocessing.start_processes(..., start_method="fork")`` makes the
ranks, each given the variables torchrun gives a rank (RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, ...) before it runs the script as ``__main__``. A rank that fails
ends the others, as torch.multiprocessing does, and this process exits 1.

    python fork_launch.py --nproc-per-node 2 train.py --seconds 5
"""

import argparse
import os
import runpy
import socket
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")  # as torchrun sets it for more than one rank, before torch reads it

import torch.distributed  # noqa: E402,F401 - imported once here, shared by every forked rank
import torch.multiprocessing as mp  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_rank(rank: int, nproc: int, port: int, script: str, argv: list[str]) -> None:
    os.environ.update({
        "RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
        "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc), "ROLE_WORLD_SIZE": str(nproc),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
    })  # fmt: skip
    sys.argv = [script, *argv]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc-per-node", type=int, default=2)
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    port = free_port()
    mp.start_processes(run_rank, args=(args.nproc_per_node, port, args.script, args.args),
                       nprocs=args.nproc_per_node, start_method="fork")  # fmt: skip


if __name__ == "__main__":
    main()
