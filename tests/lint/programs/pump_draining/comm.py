"""Point-to-point helpers: a Python object travels as its size, then its bytes."""

import pickle

import torch
import torch.distributed as dist


def send_pyobj(obj: object, dst: int) -> list[dist.Work]:
    """Start sending `obj` to `dst`: returns the two send Works (size, then payload)."""
    payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    size = torch.tensor([payload.numel()], dtype=torch.int64)
    return [dist.isend(size, dst), dist.isend(payload, dst)]


def recv_pyobj(src: int) -> object:
    size = torch.zeros(1, dtype=torch.int64)
    dist.recv(size, src)
    payload = torch.empty(int(size.item()), dtype=torch.uint8)
    dist.recv(payload, src)
    return pickle.loads(payload.numpy().tobytes())
