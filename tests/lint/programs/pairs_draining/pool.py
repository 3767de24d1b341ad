"""A pool of activation buffers, refilled with those whose sends are done."""

import torch

from .stream import ActivationStream


class BufferPool:
    def __init__(self, stream: ActivationStream, width: int) -> None:
        self.stream = stream
        self.width = width
        self.free: list[torch.Tensor] = []

    def take(self) -> torch.Tensor:
        reclaimed = self.stream.pop_sent()
        if reclaimed is not None:
            self.free.append(reclaimed)
        return self.free.pop() if self.free else torch.empty(self.width)
