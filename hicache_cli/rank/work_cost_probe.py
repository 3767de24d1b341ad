"""Two-rank measurement for `hicache doctor --works N`: what a gloo Work costs when it is
kept, dropped unwaited or waited (sends, receives, async all-reduces), whether `wait()` or
letting go of it gives the memory back, and whether the message is delivered. Run under
torchrun with 2 processes; rank 0 prints one JSON line.

Each case runs in a process group of its own (`new_group`), so one that wedges a connection
leaves the next case's alone; the cases are coordinated on the default group, which no case
touches. Memory is the process's RSS after `gc.collect()` and `malloc_trim(0)` (glibc hands
freed heap pages back), so a difference is memory still in use, not the allocator's slack.
Delivery is read from the receiving buffers themselves (a receive Work's `is_completed()`
stays False until `wait()` on gloo, like a send's): each buffer starts at -1 and every
message carries its index.

What gloo's TCP transport does, from its source (gloo/transport/tcp/pair.cc), and what the
cases check: `isend` hands the pair a weak pointer to the Work's buffer. If the peer has
already posted its receive, the data is written at once; if not, the send waits in the
pair's queue until the peer's "receive ready" notice arrives. Drop the Work before that and
the buffer is gone: the write finds an expired pointer, the operation stays at the head of
the pair's transmit queue for good, and everything later to that peer in that group (data,
notices) queues behind it - never delivered, never freed while the group lives.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

SETTLE_S = 0.3  # for messages in flight to land before buffers are read
IDLE_S = 1.0  # a receiver that sees nothing new for this long stops waiting
ROUND_TRIP_S = 3.0  # the lock-step cases: a message not landed this long after its receive was posted is lost
PEER_PAUSE_S = 0.002  # the lock-step peer's moment between its ack and its next receive
WARMUP = 500  # operations before each baseline: first-time allocations settle


def memory() -> int:
    """RSS in bytes once garbage is collected and freed heap pages are handed back."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the difference then includes free heap
        pass
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def per_work(before: int, after: int, n: int) -> float:
    return round((after - before) / n, 1) if n else 0.0


class Meter:
    """Memory read at the start of a case's measured block, half-way and at its end. The
    second half's growth per operation is the steady cost (a container's one-off growth, the
    allocator finding its size, fall in the first half); the first half's is given beside it."""

    def __init__(self, n: int, settle: Callable[[], None] | None = None) -> None:
        self.n, self.marks, self.settle = n, [0, 0, 0], settle

    def at(self, i: int) -> None:
        """Call before operation i of the block (0..n): reads memory at 0, n/2 and n (after
        `settle`, where operations finish behind the caller)."""
        if i in (0, self.n // 2, self.n):
            if self.settle is not None:
                self.settle()
            self.marks[(0, self.n // 2, self.n).index(i)] = memory()

    def result(self) -> dict[str, float]:
        half = self.n // 2
        return {
            "bytes_per_work": per_work(self.marks[1], self.marks[2], self.n - half),
            "bytes_per_work_first_half": per_work(self.marks[0], self.marks[1], half),
        }

    @property
    def end(self) -> int:
        return self.marks[2]


class Probe:
    """One rank's side of every case; rank 0 makes the Works of the send cases and both
    ranks the all-reduces; rank 1 makes the receive cases' Works."""

    def __init__(self, works: int, rounds: int, collectives: int) -> None:
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.rank = dist.get_rank()
        self.works, self.rounds, self.collectives = works, rounds, collectives
        self.store = dist.distributed_c10d._get_default_store()

    # -- helpers -------------------------------------------------------------------------

    def group(self) -> Any:
        return self.dist.new_group(backend="gloo")

    def sync(self) -> None:
        self.dist.barrier()  # the default group: no case ever touches it

    def message(self, i: int) -> Any:
        return self.torch.full((1,), float(i))

    def buffer(self) -> Any:
        return self.torch.full((1,), -1.0)

    def receive_all(self, group: Any, n: int, done_key: str) -> int:
        """Post receives one at a time, each seen landing in its buffer; stop at n, or once
        the sender said it is done (`done_key`) and nothing landed for IDLE_S. The Works are
        kept, never waited, never dropped: the receiving side changes nothing."""
        got, kept = 0, []
        while got < n:
            buf = self.buffer()
            kept.append(self.dist.irecv(buf, 0, group=group))  # hicache: ignore[HC001] - kept: the cost measured
            idle_until = None
            while buf.item() < 0:
                if idle_until is None and self.store.check([done_key]):
                    idle_until = time.monotonic() + IDLE_S
                if idle_until is not None and time.monotonic() > idle_until:
                    return got
                time.sleep(0.0002)
            got += 1
        return got

    # -- sends ---------------------------------------------------------------------------

    def send_waited(self) -> dict[str, Any]:
        group, n = self.group(), self.rounds  # a round trip each
        if self.rank == 0:
            meter = Meter(n)
            for i in range(-WARMUP, n + 1):
                meter.at(i)
                if i < n:
                    self.dist.isend(self.message(i), 1, group=group).wait()
            out: dict[str, Any] = meter.result()
        else:
            out = {"delivered": self.receive_blocking(group, WARMUP + n) - WARMUP, "of": n}
        self.sync()
        return out

    def send_kept(self, release: str) -> dict[str, Any]:
        """Kept in a list, never waited, while the peer receives them all; then let go, each
        waited first (`release` "wait") or not ("drop": after delivery)."""
        group, n = self.group(), self.works
        if self.rank == 0:
            meter, kept = Meter(n), []
            for i in range(-WARMUP, n + 1):
                meter.at(i)
                if i < n:
                    kept.append(self.dist.isend(self.message(i), 1, group=group))
            self.sync()  # the peer has every message now
            out: dict[str, Any] = {**meter.result(), **self.let_go(kept, release, meter.end)}
        else:
            out = {"delivered": self.receive_blocking(group, WARMUP + n) - WARMUP, "of": n}
            self.sync()
        self.sync()
        return out

    def let_go(self, kept: list[Any], release: str, held: int) -> dict[str, float]:
        """Let go of every kept Work (waiting each first, for "wait"); the memory freed per Work."""
        if release == "wait":
            for work in kept:
                work.wait()
        count = len(kept)
        kept[:] = [None] * count  # (the list keeps its size: only the Works go)
        return {f"freed_per_work_by_{release}": per_work(memory(), held, count)}

    def send_dropped_peer_waiting(self) -> dict[str, Any]:
        """Each isend dropped at once, but only after the peer has posted its receive (it
        says so with a message of its own, behind its receive's notice on the same pair)."""
        group, n = self.group(), self.rounds
        ready = self.torch.zeros(1)
        if self.rank == 0:
            meter = Meter(n)
            for i in range(-WARMUP, n + 1):
                meter.at(i)
                if i < n:
                    self.dist.recv(ready, 1, group=group)
                    self.dist.isend(self.message(i), 1, group=group)
            out: dict[str, Any] = meter.result()
        else:
            got = 0
            for i in range(-WARMUP, n):
                buf = self.buffer()
                work = self.dist.irecv(buf, 0, group=group)
                self.dist.send(ready, 0, group=group)
                work.wait()
                got += int(i >= 0 and buf.item() == i)
            out = {"delivered": got, "of": n}
        self.sync()
        return out

    def send_dropped_peer_behind(self) -> dict[str, Any]:
        """Each isend dropped at once while the peer receives at its own pace (a sender that
        fires and forgets); then the group is destroyed and let go."""
        group, n, key = self.group(), self.works, "probe/send_dropped_peer_behind"
        if self.rank == 0:
            meter = Meter(n)
            for i in range(-WARMUP, n + 1):
                meter.at(i)
                if i < n:
                    self.dist.isend(self.message(i), 1, group=group)
            self.store.set(key, "1")
            self.sync()
            self.dist.destroy_process_group(group)
            del group
            out: dict[str, Any] = {
                **meter.result(),
                "freed_per_work_by_destroying_the_group": per_work(memory(), meter.end, n + WARMUP),
            }
        else:
            got = self.receive_all(group, WARMUP + n, key)
            self.sync()
            self.dist.destroy_process_group(group)
            out = {"delivered": got, "of": WARMUP + n}
        self.sync()
        return out

    def lockstep(self, wait_send: bool) -> dict[str, Any]:
        """Rank 0 isends a message, then receives the peer's ack; rank 1 receives the message,
        sends the ack (blocking) and takes a moment (PEER_PAUSE_S, as a server logging the
        request does) before it posts its next receive, so rank 0's next isend goes out first.
        Dropping the isend's Work (wait_send False) is the exchange that hung. (Each receive is
        posted and watched, so a lost message ends the case after ROUND_TRIP_S rather than
        hanging it; without the pause, whether a round gets through is a race that a loaded
        machine sometimes lets all of them win.)"""
        group, n, key = self.group(), self.rounds, f"probe/lockstep/{wait_send}"
        rounds, posted = 0, []
        for i in range(n):
            if self.rank == 0:
                work = self.dist.isend(self.message(i), 1, group=group)
                if wait_send:
                    work.wait()
                del work
            buf = self.buffer()
            posted.append(self.dist.irecv(buf, 1 - self.rank, group=group))  # hicache: ignore[HC004] - seen landing
            if not self._lands(buf, key):
                break
            if self.rank == 1:
                self.dist.send(self.message(i), 0, group=group)
                time.sleep(PEER_PAUSE_S)
            rounds += 1
        self.store.set(key, "1")
        self.sync()
        # a wedged connection is not idle: its sender spins a core for as long as the group
        # lives (docs/verdicts.md), which every later case would pay for
        self.dist.destroy_process_group(group)
        return {"rounds": rounds, "of": n, "hung": rounds < n}

    def _lands(self, buf: Any, key: str) -> bool:
        """Whether the message lands in `buf` within ROUND_TRIP_S (or the peer gave up)."""
        until = time.monotonic() + ROUND_TRIP_S
        while buf.item() < 0:
            if time.monotonic() > until or self.store.check([key]):
                return buf.item() >= 0
            time.sleep(0.0002)
        return True

    # -- receives ------------------------------------------------------------------------

    def _recv_case(self, what: str) -> dict[str, Any]:
        """Rank 1 posts receives (waited; kept, then let go by "kept_wait" or "kept_drop"; or
        dropped); rank 0 sends with isends it keeps
        (so it never blocks on a receiver that can take nothing more). Delivery is read from
        the warm-up's buffers, which are kept."""
        group, n = self.group(), self.rounds if what == "waited" else self.works
        if self.rank == 0:
            kept = [self.dist.isend(self.message(i), 1, group=group) for i in range(WARMUP + n)]
            self.sync()
            self.sync()
            del kept
            out: dict[str, Any] = {}
        else:
            meter, buffers, kept = Meter(n), [], []
            for i in range(-WARMUP, n + 1):
                meter.at(i)
                if i == n:
                    break
                buf = self.buffer()
                work = self.dist.irecv(buf, 0, group=group)
                if what == "waited":
                    work.wait()
                elif what.startswith("kept"):
                    kept.append(work)
                del work
                if i < 0:
                    buffers.append(buf)
            self.sync()
            time.sleep(SETTLE_S)
            out = {**meter.result(), "delivered": sum(int(b.item() >= 0) for b in buffers), "of": len(buffers)}
            if what.startswith("kept"):
                out |= self.let_go(kept, what.split("_")[-1], meter.end)
            self.sync()
        if what == "dropped":
            self.dist.destroy_process_group(group)
        self.sync()
        return out

    def receive_blocking(self, group: Any, n: int) -> int:
        buf, got = self.buffer(), 0
        for i in range(n):
            self.dist.recv(buf, 0, group=group)
            got += int(buf.item() == i - WARMUP)
        return got

    # -- async collectives ---------------------------------------------------------------

    def _all_reduce_case(self, what: str) -> dict[str, Any]:
        """Both ranks all-reduce a fresh tensor with async_op=True (waited, kept or dropped).
        The group's worker threads run them behind the caller, so memory is read once a
        blocking all-reduce has run behind them all. Delivery is read from the warm-up's
        tensors."""
        group, n = self.group(), self.collectives

        def settle() -> None:
            self.dist.all_reduce(self.torch.ones(1), group=group)
            time.sleep(SETTLE_S)

        meter, kept, first = Meter(n, settle), [], []
        for i in range(-WARMUP, n + 1):
            meter.at(i)
            if i == n:
                break
            t = self.torch.ones(1)
            work = self.dist.all_reduce(t, group=group, async_op=True)
            if what == "waited":
                work.wait()
            elif what == "kept":
                kept.append(work)
            if i < 0:
                first.append(t)
            del work, t
        out: dict[str, Any] = {
            **meter.result(),
            "delivered": sum(int(t.item() == 2.0) for t in first),
            "of": len(first),
        }
        if what == "kept":
            out |= self.let_go(kept, "wait", meter.end)
        self.sync()
        return out

    # -- all of it -----------------------------------------------------------------------

    def cases(self) -> dict[str, Callable[[], dict[str, Any]]]:
        return {
            "send_waited": self.send_waited,
            "send_kept_then_waited": lambda: self.send_kept("wait"),
            "send_kept_then_dropped": lambda: self.send_kept("drop"),
            "send_dropped_peer_waiting": self.send_dropped_peer_waiting,
            "lockstep_waited": lambda: self.lockstep(True),
            "lockstep_dropped": lambda: self.lockstep(False),
            "send_dropped_peer_behind": self.send_dropped_peer_behind,
            "recv_waited": lambda: self._recv_case("waited"),
            "recv_kept_then_waited": lambda: self._recv_case("kept_wait"),
            "recv_kept_then_dropped": lambda: self._recv_case("kept_drop"),
            "recv_dropped": lambda: self._recv_case("dropped"),
            "all_reduce_waited": lambda: self._all_reduce_case("waited"),
            "all_reduce_kept": lambda: self._all_reduce_case("kept"),
            "all_reduce_dropped": lambda: self._all_reduce_case("dropped"),
        }


def main(argv: list[str]) -> int:
    # torch's flight recorder keeps the last 2000 collectives (~0.9 KB each here): a bounded
    # ring that fills over the first of them, whatever is waited, and would read as a cost
    # of the first Works of a case. Off, unless the caller set it.
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "0")
    import torch
    import torch.distributed as dist

    works = int(argv[1]) if len(argv) > 1 else 20_000
    rounds = max(2, works // 10)  # lock-step cases: a round trip or two each
    collectives = max(2, works // 4)  # each a job on the group's worker threads
    dist.init_process_group("gloo")
    probe = Probe(works, rounds, collectives)
    results: dict[str, Any] = {}
    for name, case in probe.cases().items():
        started = time.monotonic()
        mine = case()
        theirs: list[Any] = [None, None]
        dist.all_gather_object(theirs, mine)
        results[name] = {**theirs[1], **theirs[0], "seconds": round(time.monotonic() - started, 2)}
    if probe.rank == 0:
        head = {
            "backend": "gloo",
            "torch": torch.__version__,
            "works": works,
            "rounds": rounds,
            "collectives": collectives,
            "flight_recorder_entries": int(os.environ["TORCH_FR_BUFFER_SIZE"]),
        }
        print(json.dumps({**head, "cases": results}), flush=True)
    dist.barrier()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
