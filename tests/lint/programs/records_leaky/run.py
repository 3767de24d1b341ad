"""Two gloo ranks: rank 1 sends logits, rank 0 receives them asynchronously.

`torchrun --nproc-per-node 2 -m PACKAGE.run`
"""

import torch
import torch.distributed as dist

from .backend import Backend
from .executor import Executor
from .main_loop import update_ongoing
from .task import Task


def main(rounds: int = 20, vocab: int = 8) -> None:
    dist.init_process_group("gloo")
    executor = Executor(last_rank=1, vocab=vocab)
    for step in range(rounds):
        if dist.get_rank() == 0:
            executor.recv_logits(Task(step))
            update_ongoing()
        else:
            executor.send_logits(torch.full((vocab,), float(step)), dst=0)
    dist.barrier()
    print(f"rank {dist.get_rank()}: {len(Backend.ongoing_reqs)} receive records held")


if __name__ == "__main__":
    main()
