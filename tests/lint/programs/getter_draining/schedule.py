"""The schedule posts each chunk's sends and receives and hands the tensors to compute."""

import torch
import torch.distributed as dist

from .buffers import Buffers


class Iteration:
    def __init__(self, num_chunks: int, width: int, peer: int) -> None:
        self.bufs = Buffers(num_chunks)
        self.width = width
        self.peer = peer

    def post_send(self, chunk: int, activation: torch.Tensor) -> None:
        req = dist.isend(activation, self.peer)
        self.bufs.send_queue(chunk).append(([activation], [req]))

    def post_recv(self, chunk: int) -> None:
        into = torch.empty(self.width)
        req = dist.irecv(into, self.peer)
        self.bufs.recv_queue(chunk).append(([into], [req]))

    def take_input(self, chunk: int) -> torch.Tensor:
        tensors, reqs = self.bufs.recv_queue(chunk).pop(0)
        for req in reqs:
            req.wait()
        return tensors[0]

    def release_sent(self, chunk: int) -> None:
        queue = self.bufs.send_queue(chunk)
        while queue:
            _, reqs = queue.pop(0)
            for req in reqs:
                req.wait()
