"""What travels between the executor and the main loop."""

from dataclasses import dataclass

import torch
from torch.distributed import Work


@dataclass
class OngoingRecv:
    handle: Work
    logits: torch.Tensor
    task_id: int
