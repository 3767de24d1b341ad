"""The list of outstanding asynchronous sends that PP sync keeps, and waiting on them.

This is the `work_list` of SGLang's HiRadixCache: each PP-sync `isend` returns a Work
that is appended here together with the tensor it sends. Whatever keeps Works here keeps
their buffers alive: this list is where the incident's host memory went.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the CLI imports the policy registry without paying for torch
    import torch


class Work(Protocol):
    """What torch.distributed returns from isend: the part of it the policies use."""

    def is_completed(self) -> bool: ...

    def wait(self, timeout: timedelta = ...) -> bool: ...


@dataclass(slots=True)
class PendingSend:
    work: Work
    data: torch.Tensor  # the cloned payload; it lives as long as the Work is kept
    peer: int  # global rank of the receiver
    sent_at: float  # time.monotonic() at isend
    peer_pp: int = 0  # pipeline stage of the receiver


class WaitTimedOut(RuntimeError):
    def __init__(self, peer: int, peer_pp: int, waited_s: float) -> None:
        super().__init__(f"isend to rank {peer} (pp rank {peer_pp}) not received after {waited_s:.1f} s")
        self.peer = peer
        self.peer_pp = peer_pp
        self.waited_s = waited_s


class InjectedWaitError(RuntimeError):
    """The raise-in-wait fault: wait() failed as a broken connection would make it."""


class WorkList:
    def __init__(self) -> None:
        self._items: deque[PendingSend] = deque()
        self.held_bytes = 0  # payload bytes kept alive by outstanding sends
        self.waits = 0
        self.released = 0  # Works dropped from the list (reaped, drained or cleared)
        # What the owning thread is blocked on, for a sampler in another thread to read.
        self.blocked_on: str | None = None
        self.blocked_peer: int | None = None  # the pp rank it waits on, while blocked
        # Peers a wait timed out on: on gloo their connection is closed from then on.
        self.timed_out_peers: set[int] = set()
        self.fail_next_wait = False  # set by the raise-in-wait fault
        self.keep_every = 0  # the keep fault: every K-th released Work is kept, never freed
        self._kept: list[PendingSend] = []
        self._waiting_on: dict[tuple[str, int], str] = {}  # (where, peer pp rank) -> blocked_on text

    def __len__(self) -> int:
        return len(self._items) + len(self._kept)

    def __iter__(self):
        return iter(tuple(self._items))

    def append(self, send: PendingSend) -> None:
        self._items.append(send)
        self.held_bytes += send.data.nbytes

    def head(self) -> PendingSend:
        return self._items[0]

    def popleft(self) -> PendingSend:
        send = self._items.popleft()
        self._release(send)
        return send

    def clear(self) -> None:
        items = self._items
        if self.keep_every:
            while items:
                self._release(items.popleft())
            return
        self.released += len(items)
        for send in items:
            self.held_bytes -= send.data.nbytes
        items.clear()

    def _release(self, send: PendingSend) -> None:
        self.released += 1
        if self.keep_every and self.released % self.keep_every == 0:
            self._kept.append(send)  # an injected leak: still counted in depth and held bytes
        else:
            self.held_bytes -= send.data.nbytes

    def wait(self, send: PendingSend, timeout_s: float | None = None, where: str = "wait") -> None:
        """Block until `send` completes; raise WaitTimedOut after `timeout_s` seconds.

        On gloo a timed-out wait also closes the connection to the peer (gloo's
        "Application timeout caused pair closure"): later sends to it fail.
        `where` names the caller (the policy) for whoever reports a stall.
        """
        self.waits += 1
        if self.fail_next_wait:
            self.fail_next_wait = False
            raise InjectedWaitError(f"injected fault: wait() on isend to rank {send.peer} raised")
        key = (where, send.peer_pp)
        if (text := self._waiting_on.get(key)) is None:
            text = self._waiting_on[key] = f"{where}, waiting on isend to pp rank {send.peer_pp}"
        self.blocked_on, self.blocked_peer = text, send.peer_pp
        started = time.monotonic()
        try:
            if timeout_s is None:
                send.work.wait()
            else:
                send.work.wait(timeout=timedelta(seconds=timeout_s))
        except RuntimeError as exc:
            if "timed out" not in str(exc).lower():
                raise
            self.timed_out_peers.add(send.peer)
            raise WaitTimedOut(send.peer, send.peer_pp, time.monotonic() - started) from exc
        finally:
            self.blocked_on = self.blocked_peer = None
