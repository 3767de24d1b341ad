"""Each step's Works, by step, until they are all done."""

import torch.distributed as dist


class Pipeline:
    def __init__(self) -> None:
        self.pending: dict[int, list[dist.Work]] = {}

    def post(self, step: int, ops: list[dist.P2POp]) -> None:
        self.pending[step] = dist.batch_isend_irecv(ops)

    def settle(self) -> None:
        finished = [step for step, works in self.pending.items() if all(w.is_completed() for w in works)]
        for step in finished:
            del self.pending[step]
