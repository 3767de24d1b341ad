"""Per-chunk queues of ([tensors], [requests]) for each direction of the pipeline."""


class Buffers:
    def __init__(self, num_chunks: int) -> None:
        self.send_forward = [[] for _ in range(num_chunks)]
        self.recv_forward = [[] for _ in range(num_chunks)]

    def send_queue(self, chunk: int) -> list:
        """The sends of one chunk still in flight, oldest first."""
        return self.send_forward[chunk]

    def recv_queue(self, chunk: int) -> list:
        """The receives of one chunk posted ahead of compute, oldest first."""
        return self.recv_forward[chunk]
