"""Send a state dict's tensors to a peer through a ProcessGroup, without blocking the trainer."""

import pickle

import torch
from torch.distributed import ProcessGroup, Work


class ShardTransport:
    def __init__(self, pg: ProcessGroup) -> None:
        self._pg = pg
        self._outstanding: list[Work] = []

    def send_state(self, state: dict[str, torch.Tensor], dst: int) -> None:
        header = torch.frombuffer(bytearray(pickle.dumps(sorted(state))), dtype=torch.uint8)
        size = torch.tensor([header.numel()], dtype=torch.int64)
        self._outstanding.append(self._pg.send([size], dst, 0))
        self._outstanding.append(self._pg.send([header], dst, 1))
        for tag, name in enumerate(sorted(state), start=2):
            self._outstanding.append(self._pg.send([state[name].contiguous()], dst, tag))

    def recv_state(self, src: int, like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        size = torch.zeros(1, dtype=torch.int64)
        self._pg.recv([size], src, 0).wait()
        header = torch.empty(int(size.item()), dtype=torch.uint8)
        self._pg.recv([header], src, 1).wait()
        names = pickle.loads(header.numpy().tobytes())
        out = {}
        for tag, name in enumerate(names, start=2):
            out[name] = torch.empty_like(like[name])
            self._pg.recv([out[name]], src, tag).wait()
        return out

    def poll(self) -> int:
        """Wait for the sends posted so far; how many there were."""
        for work in self._outstanding:
            work.wait()
        count = len(self._outstanding)
        self._outstanding.clear()
        return count
