"""The main loop hands finished logits back to their tasks."""

import torch

from .backend import Backend


def update_ongoing() -> list[torch.Tensor]:
    finished = list(Backend.ongoing_reqs)
    for req in finished:
        req.handle.wait()
    Backend.ongoing_reqs.clear()
    return [req.logits for req in finished]
