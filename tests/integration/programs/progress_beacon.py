"""A trainer (rank 0) that reports its progress to a dashboard process (rank 1).

Every step the trainer posts its step number and loss with ``dist.isend`` and
moves on: it does not keep the handle, so it never waits for the dashboard.
The dashboard receives each report with a blocking ``dist.recv``. After
``--seconds`` the trainer sends a last report with step -1, and the dashboard
stops when it receives it.

``--wait`` is the careful version: the trainer waits each send
(``dist.isend(...).wait()``) before its next step. ``--step-ms`` gives each step
that much more time, as a real model's forward and backward pass would take.

Run it on CPU with gloo, for example::

    torchrun --standalone --nproc-per-node 2 progress_beacon.py --seconds 10
    torchrun --standalone --nproc-per-node 2 progress_beacon.py --seconds 10 --wait
"""

import argparse
import time

import torch
import torch.distributed as dist


def trainer(seconds: float, wait: bool, step_s: float) -> int:
    weights = torch.randn(32, 32)
    deadline = time.monotonic() + seconds
    step = 0
    while time.monotonic() < deadline:
        weights = torch.tanh(weights @ weights.T / 32)
        report = torch.tensor([float(step), weights.abs().mean().item()])
        work = dist.isend(report, dst=1)
        if wait:
            work.wait()
        if step_s:
            time.sleep(step_s)
        step += 1
    dist.send(torch.tensor([-1.0, 0.0]), dst=1)
    return step


def dashboard() -> int:
    report = torch.zeros(2)
    seen = 0
    while True:
        dist.recv(report, src=0)
        if report[0].item() < 0:
            return seen
        seen += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--wait", action="store_true", help="wait each report's send before the next step")
    parser.add_argument("--step-ms", type=float, default=0.0, help="more time each step takes (a model's compute)")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        print(f"trainer: {trainer(args.seconds, args.wait, args.step_ms / 1000)} steps\n", end="", flush=True)
    else:
        print(f"dashboard: {dashboard()} reports\n", end="", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
