"""The scheduler: each round it receives the batch from the previous stage and pumps it on."""

from .comm import recv_pyobj, send_pyobj


class PipelineScheduler:
    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size
        self.pending_sends = []

    def step(self, batch: object) -> object:
        self._drain_sends()
        if self.rank > 0:
            batch = recv_pyobj(self.rank - 1)
        if self.rank < self.world_size - 1:
            self.pending_sends.extend(send_pyobj(batch, self.rank + 1))
        return batch

    def _drain_sends(self) -> None:
        # last round's sends: waiting them frees them, and slows this stage to the next one's pace
        for work in self.pending_sends:
            work.wait()
        self.pending_sends.clear()
