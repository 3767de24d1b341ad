"""The scheduler: each round it receives the batch from the previous stage and pumps it on."""

from .comm import recv_pyobj, send_pyobj


class PipelineScheduler:
    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size
        self.pending_sends = []

    def step(self, batch: object) -> object:
        if self.rank > 0:
            batch = recv_pyobj(self.rank - 1)
        if self.rank < self.world_size - 1:
            self.pending_sends.extend(send_pyobj(batch, self.rank + 1))
        self._reap_finished_sends()
        return batch

    def _reap_finished_sends(self) -> None:
        # on gloo a send Work never completes until it is waited: nothing is ever dropped here
        self.pending_sends = [work for work in self.pending_sends if not work.is_completed()]
