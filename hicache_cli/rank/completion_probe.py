"""Two-rank measurement for `hicache doctor`: does a send Work's is_completed() turn true
without wait()? Run under torchrun with 2 processes; rank 0 prints one JSON line.

The send is received for sure (a barrier follows the recv) before rank 0 starts polling,
so a Work that still says "not completed" is one only wait() would complete: the reason a
reaper that polls is_completed() frees nothing (pytorch issue #30723).
"""

from __future__ import annotations

import json
import os
import sys
import time

POLL_S = 0.5


def main(argv: list[str]) -> int:
    import torch
    import torch.distributed as dist

    backend = argv[1] if len(argv) > 1 else "gloo"
    dist.init_process_group(backend)
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    payload = torch.ones(4, dtype=torch.int32, device=device)
    if rank == 0:
        work = dist.isend(payload.clone(), dst=1)
    else:
        dist.recv(payload, src=0)
    dist.barrier()  # rank 1 has the message now
    result = {}
    if rank == 0:
        polled_until = time.monotonic() + POLL_S
        advanced = work.is_completed()
        while not advanced and time.monotonic() < polled_until:
            time.sleep(0.01)
            advanced = work.is_completed()
        work.wait()
        result = {
            "backend": backend,
            "is_completed_advances_without_wait": advanced,
            "polled_s": POLL_S,
            "is_completed_after_wait": work.is_completed(),
        }
        print(json.dumps(result), flush=True)
    dist.barrier()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
