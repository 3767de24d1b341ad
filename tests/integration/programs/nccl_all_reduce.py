"""One or more NCCL ranks, each on its own GPU: an asynchronous all_reduce every
millisecond, whose Work is kept in ``Holder.pending`` and never waited - or, with
``--drain``, waited at once. A GPU program for ``hicache trace`` (tests marked ``cuda``).

    torchrun --standalone --nproc-per-node 1 nccl_all_reduce.py 8 [--drain]
"""

import os
import sys
import time

import torch
import torch.distributed as dist


class Holder:
    def __init__(self) -> None:
        self.pending = []  # the all_reduce Works, never waited


def main() -> None:
    seconds = float(sys.argv[1])
    drain = "--drain" in sys.argv[2:]
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl")
    tensor = torch.ones(4096, device=device)
    holder = Holder()
    steps = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        work = dist.all_reduce(tensor, async_op=True)
        if drain:
            work.wait()
        else:
            holder.pending.append(work)
        steps += 1
        time.sleep(0.001)
    torch.cuda.synchronize()
    print(f"steps={steps} kept={len(holder.pending)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
