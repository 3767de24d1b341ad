"""One asynchronous-copy contract for CUDA and CPU: a copy stream and completion events.

On CUDA, copies run on a side stream and completion is a recorded `torch.cuda.Event`,
as in SGLang's cache controller. On CPU the same shape is kept with a worker thread that
runs copies in submission order (the "stream") and a `threading.Event` per copy, so that
`query()` is false while a copy is still in flight and `synchronize()` really waits.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Protocol

import torch


class CompletionEvent(Protocol):
    def query(self) -> bool: ...

    def synchronize(self) -> None: ...


class CopyStream(Protocol):
    def submit(self, copy: Callable[[], None]) -> CompletionEvent: ...

    def close(self) -> None: ...


class CudaCopyStream:
    def __init__(self, device: torch.device) -> None:
        self._stream = torch.cuda.Stream(device=device)

    def submit(self, copy: Callable[[], None]) -> CompletionEvent:
        # The side stream must see the producer's work on the current stream first.
        self._stream.wait_stream(torch.cuda.current_stream(self._stream.device))
        with torch.cuda.stream(self._stream):
            copy()
            event = torch.cuda.Event()
            event.record(self._stream)
        return event

    def close(self) -> None:
        self._stream.synchronize()


class CpuEvent:
    def __init__(self) -> None:
        self._done = threading.Event()
        self.error: BaseException | None = None

    def query(self) -> bool:
        return self._done.is_set()

    def synchronize(self) -> None:
        self._done.wait()
        if self.error is not None:
            raise RuntimeError("asynchronous copy failed") from self.error


class CpuCopyStream:
    """Runs copies in order on one daemon thread, like a CUDA stream runs kernels."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Callable[[], None], CpuEvent] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="hicache-copy-stream", daemon=True)
        self._thread.start()

    def submit(self, copy: Callable[[], None]) -> CompletionEvent:
        if not self._thread.is_alive():
            raise RuntimeError("the copy stream is closed")
        event = CpuEvent()
        self._queue.put((copy, event))
        return event

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            copy, event = item
            try:
                copy()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiter, not swallowed
                event.error = exc
            event._done.set()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)


def make_copy_stream(device: torch.device) -> CopyStream:
    if device.type == "cuda":
        return CudaCopyStream(device)
    return CpuCopyStream()
