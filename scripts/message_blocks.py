"""hicache's event round against the bare PP sync, in blocks that alternate in the same two processes.

    torchrun --standalone --nproc-per-node 2 scripts/message_blocks.py --policy drain --pairs 12

Both ranks build the model as a `stress` rank does (cache, policy, scheduler, warm-up; the
idle workload) and run, in turn, a block of its rounds (through `run_loop`, so with the
latency ring) and a block of the bare loop of the same shape (rank 0: wait last round's
sends, isend the counts; rank 1: recv them; the default group). Blocks are counted in
rounds, so both ranks switch at the same round without a message of their own. Rank 0 prints
`model=R bare=R ratio=X median_adjacent_ratio=Y blocks=N` (messages per second). No probe
and no launcher: what is left between the two is the round itself, free of the drift of a
shared machine that whole runs suffer.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist

from hicache_cli.config import StressConfig
from hicache_cli.rank.entry import build_model, run_loop
from hicache_cli.rank.loop_stats import LoopStats
from hicache_model.pp_sync import Topology

PER_ROUND = {"drain": 2, "batched": 1}


class Bare:
    """The PP sync of a policy and nothing else."""

    def __init__(self, rank: int, per_round: int) -> None:
        self.rank = rank
        self.counts = torch.zeros(per_round, dtype=torch.int32)
        self.pending: list = []

    def run_round(self) -> None:
        t = self.counts
        if self.rank == 0:
            for work in self.pending:
                work.wait()
            self.pending = [dist.isend(t[i : i + 1].clone(), dst=1) for i in range(len(t))]
        else:
            for i in range(len(t)):
                dist.recv(t[i : i + 1], src=0)

    def settle(self) -> None:
        for work in self.pending:
            work.wait()
        self.pending = []


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--policy", choices=PER_ROUND, default="drain")
    parser.add_argument(
        "--target",
        default="model",
        help="model, or sglang==VERSION: SGLang's methods as a stress rank drives them, against the same called bare",
    )
    parser.add_argument("--pairs", type=int, default=12, help="blocks of each kind (counted, so both ranks agree)")
    parser.add_argument("--block-rounds", type=int, default=1500)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if args.target != "model":
        return sglang_blocks(args, rank)
    model, _, work_list = build_model(
        StressConfig(policy=args.policy, workload="idle"), Topology(rank, 2, 1), torch.device("cpu")
    )
    bare = Bare(rank, PER_ROUND[args.policy])
    stats = LoopStats()
    blocks: list[tuple[str, float]] = []  # (which, seconds) of block_rounds rounds each
    cpu = {"model": 0.0, "bare": 0.0}  # the main thread's CPU seconds, gloo's calls included
    dist.barrier()
    i = 0
    while True:
        which = "model" if i % 2 == 0 else "bare"
        began, cpu_began = time.perf_counter(), time.thread_time()
        if which == "model":
            try:  # run_loop, as in a stress rank (its latency ring included); the wrapper costs ~0.2 us a round
                run_loop(_Rounds(model, args.block_rounds), stats, float("inf"))
            except _BlockDone:
                pass
            for send in work_list:  # the next block starts with nothing outstanding
                work_list.wait(send)
            work_list.clear()
        else:
            for _ in range(args.block_rounds):
                bare.run_round()
            bare.settle()
        blocks.append((which, time.perf_counter() - began))
        cpu[which] += time.thread_time() - cpu_began
        i += 1
        if i == 2 * args.pairs:
            break
    dist.barrier()
    if rank == 0:
        messages = args.block_rounds * PER_ROUND[args.policy]
        blocks = blocks[2:]  # the first pair warms up
        rate = {
            w: messages * sum(1 for b in blocks if b[0] == w) / sum(s for b, s in blocks if b == w)
            for w in ("model", "bare")
        }
        ratios = [blocks[k + 1][1] / blocks[k][1] for k in range(0, len(blocks) - 1, 2)]  # bare time / model time
        print(
            f"model={rate['model']:.1f} bare={rate['bare']:.1f} ratio={rate['model'] / rate['bare']:.3f} "
            f"median_adjacent_ratio={statistics.median(ratios):.3f} blocks={len(blocks)} "
            f"cpu_us_per_round: model={cpu['model'] / (args.pairs * args.block_rounds) * 1e6:.1f} "
            f"bare={cpu['bare'] / (args.pairs * args.block_rounds) * 1e6:.1f}",
            flush=True,
        )
    os._exit(0)


def sglang_blocks(args: argparse.Namespace, rank: int) -> None:
    """SGLang's round as `stress --target sglang` drives it (counting wrappers, run_loop) against
    the same bound methods called in a plain loop with torch.distributed's own functions."""
    from hicache_cli.api import with_sglang
    from hicache_cli.rank.entry import build_sglang

    plain = (dist.isend, dist.recv, dist.all_reduce)
    loop, _, _ = build_sglang(with_sglang(StressConfig(), args.target), Topology(rank, 2, 1), torch.device("cpu"))
    wrapped = (dist.isend, dist.recv, dist.all_reduce)
    holder, stats, n = loop.holder, LoopStats(), args.block_rounds
    times: dict[str, list[float]] = {"hicache": [], "bare": []}
    cpu = {"hicache": 0.0, "bare": 0.0}
    dist.barrier()
    i = 0
    while i < 2 * args.pairs:
        which = "hicache" if i % 2 == 0 else "bare"
        dist.isend, dist.recv, dist.all_reduce = wrapped if which == "hicache" else plain
        began, cpu_began = time.perf_counter(), time.thread_time()
        if which == "hicache":
            try:
                run_loop(_Rounds(loop, n), stats, float("inf"))
            except _BlockDone:
                pass
        else:
            entry = holder.check_hicache_events
            for _ in range(n):
                entry()
        times[which].append(time.perf_counter() - began)
        cpu[which] += time.thread_time() - cpu_began
        for work in holder.work_list:  # the next block starts with nothing outstanding
            work.wait()
        holder.work_list.clear()
        i += 1
    dist.barrier()
    if rank == 0:
        h, b = times["hicache"][1:], times["bare"][1:]  # the first pair warms up
        ratios = [y / x for x, y in zip(h, b, strict=True)]
        print(
            f"hicache={n * len(h) / sum(h):.1f} bare={n * len(b) / sum(b):.1f} rounds/s "
            f"ratio={sum(b) / sum(h):.3f} median_adjacent_ratio={statistics.median(ratios):.3f} blocks={2 * len(h)} "
            f"cpu_us_per_round: hicache={cpu['hicache'] / (args.pairs * n) * 1e6:.1f} "
            f"bare={cpu['bare'] / (args.pairs * n) * 1e6:.1f}",
            flush=True,
        )
    os._exit(0)


class _Rounds:
    """`n` rounds of the model, then a stop: run_loop drives it as it drives a stress rank."""

    def __init__(self, loop, n: int) -> None:  # noqa: ANN001 - the model's scheduler
        self.loop = loop
        self.left = n

    def run_round(self) -> None:
        self.loop.run_round()
        self.left -= 1
        if self.left == 0:
            raise _BlockDone


class _BlockDone(Exception):
    pass


if __name__ == "__main__":
    main()
