"""The executor posts a receive for the last stage's logits and moves on."""

import torch
import torch.distributed as dist

from .backend import Backend
from .records import OngoingRecv
from .task import Task


class Executor:
    def __init__(self, last_rank: int, vocab: int) -> None:
        self.last_rank = last_rank
        self.vocab = vocab

    def recv_logits(self, task: Task) -> None:
        logits = torch.empty(self.vocab)
        handle = dist.irecv(logits, src=self.last_rank)
        Backend.ongoing_reqs.append(OngoingRecv(handle, logits, task.task_id))
        task.attach(handle)

    def send_logits(self, logits: torch.Tensor, dst: int) -> None:
        dist.send(logits, dst)
