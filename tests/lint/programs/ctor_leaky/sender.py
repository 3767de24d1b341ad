"""Posts activation sends into a list its owner gave it; the owner decides when they finish."""

import torch
import torch.distributed as dist


class ActivationSender:
    def __init__(self, in_flight: list[dist.Work], peer: int) -> None:
        self.in_flight = in_flight
        self.peer = peer

    def send(self, activation: torch.Tensor) -> None:
        self.in_flight.append(dist.isend(activation.detach().clone(), self.peer))
