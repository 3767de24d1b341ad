"""Train a small regression MLP split in pipeline stages with torch's Schedule1F1B (gloo).

Every rank builds the same model from one seed and keeps its own stage; rank 0 feeds the
batch, the last rank computes the loss. The run lasts ``--seconds`` (rank 0's clock,
broadcast each step so every stage stops at the same step), then each rank prints its step
count and the script ends, as training scripts usually do: without tearing the process
group down (``--destroy`` does). Left up, the gloo group aborts rank 0 as its interpreter
finalizes in about 1 run in 4 here (torch's exit race: docs/attach.md). ``--interval S``
sleeps S a step on every rank, as a step waiting on a GPU's compute would.

    torchrun --standalone --nproc-per-node 2 pp_trainer.py --seconds 20
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B


def stage_of(rank, world, width):
    torch.manual_seed(0)
    layers = [nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(2 * world - 1)]
    model = nn.Sequential(*layers, nn.Linear(width, 1))
    return model[2 * rank : 2 * rank + 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--log-every", type=int, default=50, help="steps between two loss lines")
    parser.add_argument("--destroy", action="store_true", help="destroy the process group at the end")
    parser.add_argument("--interval", type=float, default=0.0, help="each rank's sleep per step (s): a GPU's compute")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    part = stage_of(rank, world, args.width)
    stage = PipelineStage(part, stage_index=rank, num_stages=world, device=torch.device("cpu"))
    schedule = Schedule1F1B(stage, n_microbatches=args.microbatches, loss_fn=nn.MSELoss())
    optimizer = torch.optim.Adam(part.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(1)
    x = torch.randn(64, args.width, generator=data)
    y = x[:, :3].sum(dim=1, keepdim=True)

    print(f"rank {rank}/{world}: training\n", end="", flush=True)
    end = time.monotonic() + args.seconds
    steps = 0
    while True:
        go = torch.tensor([int(time.monotonic() < end)])
        dist.broadcast(go, src=0)
        if not go.item():
            break
        optimizer.zero_grad()
        if rank == 0:
            schedule.step(x)
        elif rank == world - 1:
            losses = []
            schedule.step(target=y, losses=losses)
        else:
            schedule.step()
        optimizer.step()
        if args.interval:
            time.sleep(args.interval)
        steps += 1
        if steps % args.log_every == 0:  # the last stage has the loss; rank 0 logs it
            loss = torch.stack(losses).mean().reshape(1) if rank == world - 1 else torch.zeros(1)
            if rank == world - 1:
                dist.send(loss, dst=0)
            elif rank == 0:
                dist.recv(loss, src=world - 1)
                print(f"step {steps} loss {loss.item():.4f}", flush=True)
    print(f"rank {rank}: trained {steps} steps\n", end="", flush=True)  # one write: the ranks share a terminal
    if args.destroy:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
