"""A trainer that averages its loss with the group and serves its state to a recovering peer."""

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup

from .transport import ShardTransport


class Trainer:
    def __init__(self, pg: ProcessGroup, width: int) -> None:
        self.pg = pg
        self.weight = torch.zeros(width)
        self.transport = ShardTransport(pg)

    def step(self, grad: torch.Tensor) -> None:
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.SUM
        self.pg.allreduce([grad], opts).wait()
        self.weight -= 0.1 * grad / self.pg.size()

    def serve(self, dst: int) -> None:
        self.transport.send_state({"weight": self.weight}, dst)
        self.transport.poll()
