"""A pipeline-parallel trainer for measuring what `hicache trace` costs a real training loop:
torch.distributed.pipelining's own GPipe or 1F1B schedule driving a small MLP split in
stages, gloo on CPU, the PyTorch tutorial's shape. The schedule, not this file, sends
activations and gradients (batched isend/irecv, waited by the schedule); a step is one
`schedule.step` and one optimizer step on every rank.

    torchrun --standalone --nproc-per-node 2 scripts/pipeline_steps.py --seconds 5

prints `rounds=N seconds=S rate=R` (steps) on rank 0, like scripts/tight_p2p.py, and takes
the same `--alternate`, `--switch`, `--block`, `--progress` and `--tracer-file`: with `--alternate`
the tracer (its hooks, or with `--switch agent` the whole attach agent) is switched on and
off every block on every rank at the same step (rank 0 decides, and a
broadcast a step carries its decision, in both phases), and each rank's main-thread CPU a
step is printed for both phases. A small model trains fast, so the schedule's messages are
a large share of a step: a demanding case for the tracer, if not the tight loop's.
"""

import argparse
import time

import torch
import torch.distributed as dist
from tight_p2p import add_loop_options, charge, print_blocks, print_cpu, progress, switcher, tracer_by_file
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


def main() -> None:
    parser = argparse.ArgumentParser()
    add_loop_options(parser)
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="1f1b")
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tracer_by_file(args.tracer_file)
    torch.manual_seed(0)  # every rank builds the whole model and keeps its two layers
    layers = [nn.Sequential(nn.Linear(args.width, args.width), nn.Tanh()) for _ in range(2 * world - 1)]
    model = nn.Sequential(*layers, nn.Linear(args.width, 1))
    part = model[2 * rank : 2 * rank + 2]
    stage = PipelineStage(part, stage_index=rank, num_stages=world, device=torch.device("cpu"))
    schedule = SCHEDULES[args.schedule](stage, n_microbatches=args.microbatches, loss_fn=nn.MSELoss())
    optimizer = torch.optim.SGD(part.parameters(), lr=0.01)
    x = torch.randn(args.batch_size, args.width, generator=torch.Generator().manual_seed(1))
    y = x[:, :1].tanh()

    switch = switcher(args.switch) if args.alternate else None
    flag = torch.zeros(2, dtype=torch.int64)  # (stop, phase), rank 0's decision for this step
    rounds, phase, block_rounds = 0, 0, 0
    cpu = [[0.0, 0], [0.0, 0]]
    cpu_mark = time.thread_time()
    blocks: list[tuple[int, int, float]] = []
    dist.barrier()
    started = block_start = time.perf_counter()
    progress_at = started + args.progress
    while True:
        if rank == 0:
            now = time.perf_counter()
            progress_at = progress(now, rounds, progress_at, args.progress)
            flag[0] = int(now - started >= args.seconds)
            if switch is not None and now - block_start >= args.block:
                blocks.append((phase, block_rounds, now - block_start))
                block_start, flag[1] = now, 1 - phase
        dist.broadcast(flag, src=0)
        if switch is not None and int(flag[1]) != phase:
            cpu_mark = charge(cpu, phase, block_rounds, cpu_mark)
            block_rounds, phase = 0, int(flag[1])
            switch(phase)
        if flag[0]:
            break
        optimizer.zero_grad()
        if rank == 0:
            schedule.step(x)
        elif rank == world - 1:
            schedule.step(target=y)
        else:
            schedule.step()
        optimizer.step()
        rounds += 1
        block_rounds += 1
    elapsed = time.perf_counter() - started
    mine = torch.tensor([cpu[0][0], cpu[0][1], cpu[1][0], cpu[1][1]], dtype=torch.float64)
    every = [torch.zeros(4, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(every, mine)
    if rank == 0:
        print(f"rounds={rounds} seconds={elapsed:.3f} rate={rounds / elapsed:.1f}", flush=True)
        if blocks:
            print_blocks(blocks)
            for r, c in enumerate(every):
                print_cpu(f"rank{r}", [[c[0].item(), c[1].item()], [c[2].item(), c[3].item()]])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
