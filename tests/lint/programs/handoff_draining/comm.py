"""Point-to-point helpers shared by every stage: post a send, keep its Work where the caller says."""

import torch
import torch.distributed as dist


def start_send(tensor: torch.Tensor, dst: int, pending: list[dist.Work]) -> None:
    """Post an asynchronous send of a copy of `tensor` to `dst`; its Work joins `pending`."""
    pending.append(dist.isend(tensor.detach().clone(), dst))


def recv_from(shape: tuple[int, ...], src: int) -> torch.Tensor:
    buffer = torch.empty(shape)
    dist.recv(buffer, src)
    return buffer
