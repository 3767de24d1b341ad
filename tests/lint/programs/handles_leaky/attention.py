"""Attention over a sequence split across ranks: queries, keys and values all-to-all'd in."""

import torch
import torch.distributed as dist

from .all_to_all import SeqAllToAll


class SeqParallelAttention(torch.nn.Module):
    def __init__(self, group: dist.ProcessGroup, overlap: bool) -> None:
        super().__init__()
        self.group = group
        self.handles = {} if overlap else None

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        q = SeqAllToAll.apply(query, self.group, self.handles, "q")
        k = SeqAllToAll.apply(key, self.group, self.handles, "k")
        v = SeqAllToAll.apply(value, self.group, self.handles, "v")
        if self.handles is not None:
            q, k, v = (self.finished(kind) for kind in ("q", "k", "v"))
        scores = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
        return scores @ v

    def finished(self, kind: str) -> torch.Tensor:
        """The output of an overlapped exchange."""
        return self.handles[kind + "_output"]
