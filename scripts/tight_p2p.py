"""A tight P2P loop for measuring what `hicache trace` costs a program: rank 0 waits last
round's send and isends one small tensor a round, rank 1 receives it. One message a round,
nothing else; rank 0 sets the pace and, after --seconds, sends the stop flag.

    torchrun --standalone --nproc-per-node 2 scripts/tight_p2p.py --seconds 5

prints `rounds=N seconds=S rate=R` on rank 0; with `--progress S` also `progress t=T rounds=N`
every S seconds (scripts/attach_cost.py reads rates before and after attaching from them).
With `--alternate` (hicache importable) the run switches the tracer on and off every
`--block` seconds, on both ranks at the same round (`--switch hooks`: its Work hooks alone;
`--switch agent`: hooks and probe, the agent `hicache attach` injects; `--switch probe`:
its probe alone), and prints the rates:
untraced and traced rounds measured in the same processes, minutes apart at most, so the
machine's drift hits both alike; and each rank's main-thread CPU per round, traced and
untraced (CPU time is what the hooks add, and unlike the rate it hardly moves when other
jobs share the machine). With `--tracer-file DIR` the tracer `hicache attach` installs runs
in-process while DIR/on exists (tracer_by_file).
"""

import argparse
import itertools
import statistics
import time

import torch
import torch.distributed as dist
from intervals import median_interval


def main() -> None:
    parser = argparse.ArgumentParser()
    add_loop_options(parser)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tracer_by_file(args.tracer_file)
    switch = switcher(args.switch) if args.alternate else None
    message = torch.zeros(3, dtype=torch.int64)
    rounds, pending, phase = 0, None, 0
    cpu = [[0.0, 0], [0.0, 0]]  # per phase: main-thread CPU seconds, rounds
    cpu_mark = time.thread_time()
    blocks: list[tuple[int, int, float]] = []  # (phase, rounds, seconds), rank 0
    dist.barrier()
    started = block_start = time.perf_counter()
    block_rounds = 0
    progress_at = started + args.progress
    while True:
        if rank == 0:
            now = time.perf_counter()
            progress_at = progress(now, rounds, progress_at, args.progress)
            stop = now - started >= args.seconds
            if switch is not None and now - block_start >= args.block:
                blocks.append((phase, block_rounds, now - block_start))
                cpu_mark = charge(cpu, phase, block_rounds, cpu_mark)
                block_start, block_rounds, phase = now, 0, 1 - phase
                switch(phase)
            if pending is not None:
                pending.wait()
            message[0], message[1], message[2] = rounds, int(stop), phase
            pending = dist.isend(message.clone(), dst=1)
        else:
            dist.recv(message, src=0)
            stop = bool(message[1])
            if switch is not None and int(message[2]) != phase:
                cpu_mark = charge(cpu, phase, block_rounds, cpu_mark)
                block_rounds = 0
                phase = int(message[2])
                switch(phase)
        rounds += 1
        block_rounds += 1
        if stop:
            break
    elapsed = time.perf_counter() - started
    if pending is not None:
        pending.wait()
    dist.barrier()
    peer_cpu = None
    if switch is not None:  # rank 1's CPU per phase, to rank 0
        mine = torch.tensor([cpu[0][0], cpu[0][1], cpu[1][0], cpu[1][1]], dtype=torch.float64)
        if rank == 1:
            dist.send(mine, dst=0)
        else:
            peer_cpu = torch.zeros(4, dtype=torch.float64)
            dist.recv(peer_cpu, src=1)
    if rank == 0:
        print(f"rounds={rounds} seconds={elapsed:.3f} rate={rounds / elapsed:.1f}", flush=True)
        if blocks:
            print_blocks(blocks)
            print_cpu("rank0", cpu)
            print_cpu("rank1", [[peer_cpu[0].item(), peer_cpu[1].item()], [peer_cpu[2].item(), peer_cpu[3].item()]])
    dist.destroy_process_group()


def add_loop_options(parser: argparse.ArgumentParser) -> None:
    """The options of a measured loop (this one, scripts/pipeline_steps.py)."""
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--alternate", action="store_true", help="switch the tracer on and off")
    parser.add_argument(
        "--switch",
        choices=("hooks", "agent", "probe"),
        default="hooks",
        help="with --alternate: the Work hooks alone, the attach agent (hooks and probe), or its probe alone",
    )
    parser.add_argument("--block", type=float, default=1.0, help="seconds per block with --alternate")
    parser.add_argument("--progress", type=float, default=0.0, help="rank 0 prints its round count this often (s)")
    parser.add_argument(
        "--tracer-file", default=None, help="DIR: the attach agent's tracer in-process while DIR/on exists"
    )


def tracer_by_file(directory: str | None) -> None:
    """With --tracer-file DIR: a thread runs the agent `hicache attach` injects (its Work hooks
    and its probe, installed from a thread mid-run, no census), in-process with no debugger,
    while DIR/on exists, and takes it out when the file goes; DIR/ready-RANK is there while
    it is in. scripts/attach_cost.py --in-process compares it with the attached tracer in
    the same run. hicache is imported the first time, as an attach would."""
    if not directory:
        return
    import threading
    from pathlib import Path

    control, rank = Path(directory), dist.get_rank()

    def run() -> None:
        agent, turns = None, 0
        while True:
            time.sleep(0.2)
            wanted = (control / "on").exists()
            if wanted and agent is None:
                agent, turns = start_agent(control / f"run-{rank}-{turns}"), turns + 1
                (control / f"ready-{rank}").touch()
            elif not wanted and agent is not None:
                agent.detach("switched off")
                agent = None
                (control / f"ready-{rank}").unlink()

    threading.Thread(target=run, name="tracer-by-file", daemon=True).start()


def progress(now: float, rounds: int, due: float, every: float) -> float:
    """Rank 0's `progress t=T rounds=N` line once it is due (scripts/attach_cost.py reads
    the rates from them); when the next one is."""
    if not every or now < due:
        return due
    print(f"progress t={now:.4f} rounds={rounds}", flush=True)
    return due + every


def charge(cpu: list[list[float]], phase: int, rounds: int, mark: float) -> float:
    """Add the block that just ended to its phase's CPU and rounds (the first block, the warm-up, is left out)."""
    now = time.thread_time()
    if cpu[0][1] or cpu[1][1] or phase == 1:  # the first untraced block warms up
        cpu[phase][0] += now - mark
        cpu[phase][1] += rounds
    else:
        cpu[phase][1] = 0
    return now


def print_cpu(who: str, cpu: list[list[float]]) -> None:
    per = [c / max(1, r) * 1e6 for c, r in cpu]
    added = per[1] - per[0]
    line = f"{who}_cpu_us_untraced={per[0]:.2f} {who}_cpu_us_traced={per[1]:.2f} {who}_cpu_us_added={added:.2f}"
    print(line, flush=True)


def start_agent(run_dir):  # noqa: ANN001, ANN201
    """The agent `hicache attach` injects (Work hooks and probe, no census), started in-process
    by the calling thread, writing to RUN_DIR (made here)."""
    import os

    from hicache_cli.attach import protocol
    from hicache_cli.attach.agent import Agent

    run_dir.mkdir()
    agent = Agent(
        protocol.BootArgs(str(run_dir), "", "", census=False), protocol.AgentStatus(os.getpid(), protocol.ATTACHED)
    )
    agent.attach()
    return agent


def switcher(what: str):  # noqa: ANN201
    """on(1)/off(0) for hicache's Work hooks as `hicache trace` installs them (`hooks`); for
    the whole agent `hicache attach` injects, its probe too (`agent`); or for that probe alone,
    sampling a table no hook fills (`probe`). A fresh agent or probe each time, its rank
    files in a temporary directory removed at exit."""
    import atexit
    import os
    import shutil
    import sys
    import tempfile
    from pathlib import Path

    from hicache_cli.tracer import works

    c10d = dist.distributed_c10d
    torch_dir = os.path.dirname(sys.modules["torch"].__file__) + os.sep
    if what in ("agent", "probe"):
        from hicache_cli.attach.agent import GUEST  # (imported here, not in a measured block)
        from hicache_cli.rank.loop_stats import LoopStats
        from hicache_cli.tracer.protocol import TraceEnv
        from hicache_cli.tracer.session import Session

        scratch, turns, running = Path(tempfile.mkdtemp(prefix="hicache-switch-")), itertools.count(), []
        atexit.register(shutil.rmtree, scratch, True)

        def start_probe(run_dir: Path):  # noqa: ANN202 - the probe alone, on a table no hook fills
            run_dir.mkdir()
            table, env = works.WorkTable(skip_prefixes=(torch_dir,)), TraceEnv(run_dir, 10.0, None, None)
            return Session(env, table, LoopStats(), dist.get_rank(), dist.get_world_size(), GUEST)

        def switch_guest(on: int) -> None:
            if not on:
                if running:
                    running.pop().detach("switched off")
                return
            run_dir = scratch / f"{what}-{next(turns)}"
            running.append(start_agent(run_dir) if what == "agent" else start_probe(run_dir))

        return switch_guest
    table = works.WorkTable(skip_prefixes=(torch_dir,))

    def switch(on: int) -> None:
        if on:
            works.install(table, c10d.ProcessGroup, c10d.Work, c10d.get_global_rank)
        else:
            works.uninstall(c10d.ProcessGroup)

    return switch


def print_blocks(blocks: list[tuple[int, int, float]]) -> None:
    blocks = blocks[1:]  # the first block warms up
    rate = {p: sum(r for q, r, _ in blocks if q == p) / sum(s for q, _, s in blocks if q == p) for p in (0, 1)}
    pairs = [(blocks[i], blocks[i + 1]) for i in range(len(blocks) - 1)]
    ratios = [
        (b[1] / b[2]) / (a[1] / a[2]) if a[0] == 0 else (a[1] / a[2]) / (b[1] / b[2])  # traced / untraced
        for a, b in pairs
    ]
    low, high = median_interval(ratios)
    print(
        f"untraced={rate[0]:.1f} traced={rate[1]:.1f} ratio={rate[1] / rate[0]:.3f} "
        f"median_adjacent_ratio={statistics.median(ratios):.3f} low={low:.3f} high={high:.3f} blocks={len(blocks)}",
        flush=True,
    )


if __name__ == "__main__":
    main()
