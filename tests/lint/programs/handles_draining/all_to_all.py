"""The all-to-all that swaps the sequence and head dimensions, as an autograd function."""

from typing import Any

import torch
import torch.distributed as dist


def all_to_all(x: torch.Tensor, group: dist.ProcessGroup, handles: dict | None, kind: str) -> torch.Tensor:
    """Exchange `x` across the group. With `handles`, start the exchange and leave its Work and
    output there under `kind` for whoever needs the result; else wait for it here."""
    output = torch.empty_like(x)
    overlap = handles is not None
    work = dist.all_to_all_single(output, x.contiguous(), group=group, async_op=overlap)
    if overlap:
        handles[kind + "_work"] = work
        handles[kind + "_output"] = output
        return output
    return output


class SeqAllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup, handles: dict | None, kind: str) -> torch.Tensor:
        ctx.group = group
        return all_to_all(x, group, handles, kind)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return all_to_all(grad, ctx.group, None, "grad"), None, None, None
