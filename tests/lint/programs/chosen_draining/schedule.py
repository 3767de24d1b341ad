"""A forward-only pipeline schedule: receive from the previous stage, compute, send on."""

import torch

from .p2p import communicate


class ForwardSchedule:
    def __init__(self, rank: int, world_size: int, width: int, batch_p2p: bool) -> None:
        self.rank = rank
        self.world_size = world_size
        self.width = width
        self.batch_p2p = batch_p2p
        self.outstanding = []

    def run_microbatch(self, x: torch.Tensor) -> torch.Tensor:
        if self.rank > 0:
            x = torch.empty(self.width)
            for req in communicate(None, x, self.rank, self.batch_p2p):
                req.wait()
        y = x * 2
        if self.rank < self.world_size - 1:
            self.outstanding.extend(communicate(y, None, self.rank, self.batch_p2p))
        self.retire()
        return y

    def retire(self) -> None:
        for req in self.outstanding:
            req.wait()
        self.outstanding.clear()
