"""The pipeline: sends each microbatch's activation and settles the sends at the start of a round."""

import torch

from .sender import ActivationSender


class Pipeline:
    def __init__(self, peer: int) -> None:
        self.in_flight = []
        self.sender = ActivationSender(self.in_flight, peer)

    def round(self, activations: list[torch.Tensor]) -> None:
        self.settle()
        for activation in activations:
            self.sender.send(activation)

    def settle(self) -> None:
        for work in self.in_flight:
            work.wait()
        self.in_flight.clear()
