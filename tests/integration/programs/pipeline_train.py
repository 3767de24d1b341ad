"""Pipeline-parallel training of a small MLP with torch.distributed.pipelining.

Follows the PyTorch pipelining tutorial: every rank builds the same model, keeps
only its own slice of layers, wraps it in a ``PipelineStage`` (manual stage
construction), and drives it with ``ScheduleGPipe`` or ``Schedule1F1B``. Rank 0
feeds the batch, the last rank computes the loss; every rank steps its own
optimizer. The schedules send activations and gradients with batched P2P ops
and wait them, so this is a well-behaved program.

Run it on CPU with gloo, for example::

    torchrun --standalone --nproc-per-node 2 pipeline_train.py --schedule gpipe --steps 10
    torchrun --standalone --nproc-per-node 4 pipeline_train.py --schedule 1f1b --microbatches 4

1F1B needs at least as many microbatches as stages. ``--seconds`` (if > 0)
makes the program train for that long instead of ``--steps`` steps.
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


def build_model(n_blocks: int, width: int) -> nn.Sequential:
    blocks = [nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(n_blocks - 1)]
    return nn.Sequential(*blocks, nn.Linear(width, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="gpipe")
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=0.0, help="train for this long instead (if > 0)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--blocks-per-stage", type=int, default=2)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")

    # Same seed everywhere: every rank builds the full model, then keeps its slice.
    torch.manual_seed(0)
    model = build_model(world_size * args.blocks_per_stage, args.width)
    first = rank * args.blocks_per_stage
    stage_module = model[first : first + args.blocks_per_stage]
    stage = PipelineStage(stage_module, stage_index=rank, num_stages=world_size, device=device)
    schedule = SCHEDULES[args.schedule](stage, n_microbatches=args.microbatches, loss_fn=nn.MSELoss())
    optimizer = torch.optim.SGD(stage_module.parameters(), lr=0.1)

    # A fixed synthetic regression task, known to every rank.
    data_gen = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch_size, args.width, generator=data_gen)
    y = x[:, :4].sum(dim=1, keepdim=True).tanh()

    deadline = time.monotonic() + args.seconds

    def keep_going(step: int) -> bool:
        if args.seconds <= 0:
            return step < args.steps
        # Every stage must run the same number of steps: rank 0's clock decides.
        go = torch.tensor([int(step == 0 or time.monotonic() < deadline)])
        dist.broadcast(go, src=0)
        return bool(go.item())

    step = 0
    while keep_going(step):
        optimizer.zero_grad()
        if rank == 0:
            schedule.step(x)
        elif rank == world_size - 1:
            losses = []
            schedule.step(target=y, losses=losses)
            loss = torch.stack(losses).mean().item()
            print(f"step {step} loss {loss:.5f}\n", end="", flush=True)
        else:
            schedule.step()
        optimizer.step()
        step += 1

    print(f"rank {rank}/{world_size}: schedule={args.schedule} steps={step}\n", end="", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
