"""What the tracer's hooks cost one point-to-point round, in CPU nanoseconds, without a
network: the Work-returning `send`/`recv` and `Work.wait` are stand-ins (plain Python, the
same for both arms), called through torch.distributed-like functions compiled under a
torch-like file name, so the hooks walk exactly the frames they walk in a real program.

    python scripts/hook_cost.py [--rounds N] [--blocks K] [--torch [--pipeline]]

Two rounds are timed, as scripts/tight_p2p.py runs them: rank 0's (isend one tensor, wait
last round's Work) and rank 1's (a blocking recv: torch waits the Work itself). Blocks with
the hooks installed and without alternate in one process; the medians of each arm's
per-round main-thread CPU time, and their difference: what the hooks add. CPU time, not
rates, so other jobs on the machine hardly move it. With --torch the calls go through
torch.distributed's own isend and recv (its frames, its checks, real tensors) to the
stand-in group, entered in torch's table of group ranks; without, through a few lines that
call the group as they do.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

TORCH = "/fake/site-packages/torch/"
_C10D = """
def isend(tensor, dst, group):
    return group.send([tensor], dst, 0)

def irecv(tensor, src, group):
    return group.recv([tensor], src, 0)

def recv(tensor, src, group):
    work = irecv(tensor, src, group)
    work.wait()
    return src
"""


class Work:
    """Stands for c10d.Work (a C++ object with weak references)."""

    __slots__ = ("__weakref__",)

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return False


class Group:
    """Stands for c10d.ProcessGroup: send/recv hand out a Work; no data moves."""

    group_name = "0"

    def send(self, tensors: list[Any], dst: int, tag: int) -> Work:
        return Work()

    def recv(self, tensors: list[Any], src: int, tag: int) -> Work:
        return Work()


def rounds(n: int, c10d: dict[str, Any], group: Group, tensor: Any) -> tuple[float, float]:
    """(rank 0's round, rank 1's round), CPU seconds each."""
    isend, recv = c10d["isend"], c10d["recv"]
    pending = None
    start = time.thread_time()
    for _ in range(n):
        if pending is not None:
            pending.wait()
        pending = isend(tensor, 1, group)
    pending.wait()
    middle = time.thread_time()
    for _ in range(n):
        recv(tensor, 0, group)
    end = time.thread_time()
    return (middle - start) / n, (end - middle) / n


def _through_torch(group: Group, pipeline: bool) -> tuple[dict[str, Any], Any, str]:
    """isend and recv as a program calls them, to `group` (a stand-in torch never checks the
    type of: it needs only its ranks in its table). With `pipeline`, the isend as
    torch.distributed.pipelining's schedules post theirs: a P2POp through the schedules' own
    `_sorted_batch_p2p`, four torch frames deep (a trainer's step adds two more)."""
    import os

    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining.schedules import _sorted_batch_p2p

    dist.distributed_c10d._world.pg_group_ranks[group] = {0: 0, 1: 1}
    functions = {
        "isend": lambda t, dst, g: dist.isend(t, dst, group=g),
        "recv": lambda t, src, g: dist.recv(t, src, group=g),
    }
    if pipeline:
        functions["isend"] = lambda t, dst, g: _sorted_batch_p2p([dist.P2POp(dist.isend, t, dst, g)])[dst][0]
    return functions, torch.zeros(3, dtype=torch.int64), os.path.dirname(torch.__file__) + os.sep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50_000)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--torch", action="store_true", help="through torch.distributed's own functions")
    parser.add_argument("--pipeline", action="store_true", help="with --torch: rank 0 sends as pipelining schedules do")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from hicache_cli.tracer import works

    group = Group()
    if args.torch:
        c10d, tensor, skip = _through_torch(group, args.pipeline)
    else:
        c10d = {}
        exec(compile(_C10D, TORCH + "distributed/distributed_c10d.py", "exec"), c10d)  # noqa: S102
        tensor, skip = SimpleNamespace(nbytes=24), TORCH
    table = works.WorkTable(skip_prefixes=(skip,))
    arms: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    rounds(args.rounds, c10d, group, tensor)  # warm up
    for block in range(args.blocks):
        for on in (False, True) if block % 2 else (True, False):
            if on:
                works.install(table, Group, Work, lambda g, r: r)
            else:
                works.uninstall(Group)
            arms[on].append(rounds(args.rounds, c10d, group, tensor))
    works.uninstall(Group)
    for i, who in enumerate(("rank 0 (isend + wait)", "rank 1 (blocking recv)")):
        off = statistics.median(a[i] for a in arms[False]) * 1e9
        on = statistics.median(a[i] for a in arms[True]) * 1e9
        print(f"{who}: untraced {off:.0f} ns, traced {on:.0f} ns, hooks add {on - off:.0f} ns a round")


if __name__ == "__main__":
    main()
