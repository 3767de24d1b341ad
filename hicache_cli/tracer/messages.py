"""A traced process's point-to-point messages, counted per peer and process group.

Every message goes through `ProcessGroup.send` or `ProcessGroup.recv`, whatever the program
called: `dist.send` and `dist.recv` (blocking: torch waits the Work itself), `isend`,
`irecv`, `batch_isend_irecv`, a group's own methods. So those two methods are wrapped here,
and each call counts one message (and its tensor bytes) against (group, peer) in its
direction. A send is counted when it is posted, a receive when it is posted: the backlog
from A to B (sent by A minus received by B, analysis/messages.py) is what B has not yet
asked for.

The hot path is a dict lookup and two additions; the peer's global rank and the group's
name are worked out once per (group, peer), and read only when the probe takes a snapshot.
As in works.WorkTable, no lock is taken on the hot path: two threads sending to the same
peer at the very same moment may miss a count.

Stdlib only; the classes to patch are passed in (works.install), so this is tested with fakes.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

# A snapshot row, as samples carry it (Sample.peers): one per (group, peer).
# [peer, group, sent, sent_bytes, received, received_bytes]
Row = list[Any]
MAX_PEERS = 1024  # (group, peer) pairs counted one by one; the rest under peer -1


class PeerMessages:
    """Counts by (id(group), group rank of the peer): `sent` and `received`, each
    [messages, bytes]. The keys' global rank and group name are kept in `where`."""

    def __init__(self, to_global: Callable[[Any, int], int] | None = None) -> None:
        self.sent: dict[tuple[int, int], list[int]] = {}
        self.received: dict[tuple[int, int], list[int]] = {}
        self.where: dict[tuple[int, int], tuple[int, str]] = {}  # -> (global peer, group name)
        self.to_global = to_global
        self._new = threading.Lock()  # only when a (group, peer) is first seen

    def clear(self) -> None:
        """Forget every count (a forked child), keeping the dicts the wrappers hold."""
        self.sent.clear()
        self.received.clear()
        self.where.clear()

    def counter(self, counts: dict[tuple[int, int], list[int]], group: Any, group_peer: int) -> list[int]:
        """The [messages, bytes] of a (group, peer) seen for the first time in `counts`."""
        key = (id(group), group_peer)
        with self._new:
            found = counts.get(key)
            if found is not None:
                return found
            if key not in self.where:
                if len(self.where) >= MAX_PEERS:
                    key = (0, -1)
                    self.where.setdefault(key, (-1, "(other)"))
                else:
                    self.where[key] = (self._global(group, group_peer), _group_name(group))
            return counts.setdefault(key, [0, 0])

    def _global(self, group: Any, group_peer: int) -> int:
        if self.to_global is None:
            return group_peer
        try:
            return int(self.to_global(group, group_peer))
        except (RuntimeError, ValueError, TypeError):
            return group_peer

    def totals(self) -> tuple[int, int]:
        """(messages sent, messages received), over every peer."""
        return sum(c[0] for c in list(self.sent.values())), sum(c[0] for c in list(self.received.values()))

    def snapshot(self) -> list[Row]:
        """One row per (group, peer), sorted: [peer, group, sent, sent_bytes, received, received_bytes]."""
        rows: dict[tuple[int, str], Row] = {}
        for column, counts in ((2, self.sent), (4, self.received)):
            for key, (messages, nbytes) in list(counts.items()):
                peer, group = self.where.get(key, (key[1], "?"))
                row = rows.setdefault((peer, group), [peer, group, 0, 0, 0, 0])
                row[column] += messages
                row[column + 1] += nbytes
        return [rows[k] for k in sorted(rows)]


def _group_name(group: Any) -> str:
    """The name torch gives the group, the same on every rank that made it in the same order."""
    try:
        return str(group.group_name)
    except (AttributeError, RuntimeError, TypeError):
        return "?"


def nbytes(tensors: Any) -> int:
    try:
        if len(tensors) == 1:  # send/recv: one tensor
            return int(tensors[0].nbytes)
        return sum(int(t.nbytes) for t in tensors)
    except (TypeError, AttributeError):
        return 0


CreatedWork = Callable[..., None]


def counting(
    messages: PeerMessages, name: str, original: Callable[..., Any], created_work: CreatedWork, to_global: Any
) -> Callable[..., Any]:
    """`ProcessGroup.send` or `.recv`, counting the message, then handing the Work to the
    Work table (`created_work(work, name, caller's frame, (group, tensors, peer, to_global))`)."""
    counts = messages.sent if name == "send" else messages.received
    new = messages.counter

    def method(self: Any, tensors: Any, peer: Any, *rest: Any, **kwargs: Any) -> Any:
        work = original(self, tensors, peer, *rest, **kwargs)
        count = counts.get((id(self), peer))
        if count is None:
            count = new(counts, self, peer)
        count[0] += 1
        count[1] += tensors[0].nbytes if len(tensors) == 1 else nbytes(tensors)
        if work is not None:
            created_work(work, name, sys._getframe(1), (self, tensors, peer, to_global))
        return work

    method.__name__ = name
    method.__qualname__ = f"ProcessGroup.{name}"
    method.__doc__ = original.__doc__
    return method
