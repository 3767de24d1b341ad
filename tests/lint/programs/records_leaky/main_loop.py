"""The main loop hands finished logits back to their tasks."""

import torch

from .backend import Backend


def update_ongoing() -> list[torch.Tensor]:
    finished = []
    for req in Backend.ongoing_reqs:
        if req.handle.is_completed():
            finished.append(req)
    for req in finished:
        Backend.ongoing_reqs.remove(req)
    return [req.logits for req in finished]
