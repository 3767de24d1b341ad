"""Sends activations downstream, keeping (tensor, Work) pairs so a tensor outlives its send."""

import torch
import torch.distributed as dist


class ActivationStream:
    def __init__(self, peer: int) -> None:
        self.peer = peer
        self.in_flight: list[tuple[torch.Tensor, dist.Work]] = []

    def push(self, activation: torch.Tensor) -> None:
        work = dist.isend(activation, self.peer)
        self.in_flight.append((activation, work))

    def pop_sent(self) -> torch.Tensor | None:
        """The oldest activation whose send has finished (None while it is still in flight): its
        buffer may be reused."""
        if not self.in_flight:
            return None
        activation, work = self.in_flight[0]
        if not work.is_completed():
            return None
        self.in_flight.pop(0)
        return activation
