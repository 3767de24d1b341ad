"""Exchange tensors with the neighbouring stages, one op at a time or as one batch."""

import torch
import torch.distributed as dist


def _plain_ops(send_next: torch.Tensor | None, recv_prev: torch.Tensor | None, rank: int) -> list[dist.Work]:
    reqs = []
    if send_next is not None:
        reqs.append(dist.isend(send_next, rank + 1))
    if recv_prev is not None:
        reqs.append(dist.irecv(recv_prev, rank - 1))
    return reqs


def _batched_ops(send_next: torch.Tensor | None, recv_prev: torch.Tensor | None, rank: int) -> list[dist.Work]:
    ops = []
    if send_next is not None:
        ops.append(dist.P2POp(dist.isend, send_next, rank + 1))
    if recv_prev is not None:
        ops.append(dist.P2POp(dist.irecv, recv_prev, rank - 1))
    return dist.batch_isend_irecv(ops) if ops else []


def communicate(
    send_next: torch.Tensor | None, recv_prev: torch.Tensor | None, rank: int, batch_p2p: bool
) -> list[dist.Work]:
    """Start the exchange; the caller owns the returned requests."""
    p2p_func = _batched_ops if batch_p2p else _plain_ops
    return p2p_func(send_next, recv_prev, rank)
