"""Two gloo ranks: rank 0 pushes buffers through the hook, rank 1 receives.

`torchrun --nproc-per-node 2 -m PACKAGE.run`
"""

import torch
import torch.distributed as dist

from . import worker


def main(rounds: int = 20) -> None:
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        worker.setup(dst=1)
        for step in range(rounds):
            worker.push(torch.full((4,), float(step)))
        print(f"rank 0: {len(worker.HOOKS['in_flight'])} sends held")
    else:
        for _ in range(rounds):
            dist.recv(torch.empty(4), src=0)
    dist.barrier()


if __name__ == "__main__":
    main()
