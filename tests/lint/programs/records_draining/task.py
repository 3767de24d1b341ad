"""A task waiting for its logits."""


class Task:
    def __init__(self, task_id: int) -> None:
        self.task_id = task_id
        self.handle = None

    def attach(self, handle: object) -> None:
        """Remember the receive this task waits for (stored, not waited)."""
        self.handle = handle

    def release(self) -> None:
        self.handle = None
