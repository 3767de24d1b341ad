"""What an event loop publishes for its probe, and the pure summaries of it.

Stdlib only (numpy is used when the caller has it): the same pieces serve a rank of
hicache's own workload and, through `hicache trace`, a loop in someone else's program.
"""

from __future__ import annotations

import os
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

from hicache_cli.histogram import LatencyHistogram

RING = 1 << 14  # round latencies kept between samples: all of them below 160k rounds/s at 10 Hz
RING_MASK = RING - 1
SUMMARY_ROUNDS = 2048  # rounds a sample's latency summary looks at, at most


@dataclass
class LoopStats:
    """What the event loop publishes for the probe; plain attributes, written by one thread.

    Round latencies go into a fixed ring of doubles, not a growing list: an idle loop runs
    hundreds of thousands of rounds a second, and per-round objects would show up in the
    very RSS being measured.
    """

    rounds: int = 0
    round_started: float = field(default_factory=time.perf_counter)
    latency_ring: array = field(default_factory=lambda: array("d", bytes(8 * RING)))
    stop_requested: bool = False
    in_round: int = 0  # hicache trace: calls of the --loop function under way
    # threading.get_ident() of the thread running the rounds: its block in a stack dump
    # (faulthandler names threads by it) is where the loop is stuck
    thread: int | None = None

    def record(self, seconds: float) -> None:
        """One finished round (run_loop inlines exactly this)."""
        self.latency_ring[self.rounds & RING_MASK] = seconds
        self.rounds += 1


@dataclass(frozen=True)
class RankIdentity:
    rank: int
    pp_rank: int
    tp_rank: int
    node: int = 0
    host: str | None = None
    world: str | None = None  # a traced process: the rendezvous of its default process group


@dataclass
class Readings:
    """Readings from the cache side, gathered by a callable the rank provides."""

    depth: int = 0
    held_bytes: int = 0
    sent: int = 0
    received: int = 0
    blocked_on: str | None = None
    blocked_peer: int | None = None  # the pp rank the loop waits on, while blocked
    counters: dict[str, float] = field(default_factory=dict)
    digests: dict[str, int] = field(default_factory=dict)
    gpu_bytes: int | None = None  # CUDA memory the rank's tensors hold, on a GPU
    device_name: str | None = None  # "cpu" or the GPU model
    works: dict[str, int] | None = None  # hicache trace: the process's Work counts
    sites: list[dict[str, Any]] | None = None  # hicache trace: Works by creation site, when due
    peers: list[list[Any]] | None = None  # hicache trace: messages per peer and group (Sample.peers)
    holders: list[dict[str, Any]] | None = None  # hicache attach --follow: a new census's holders


def latency_summary(latencies: list[float]) -> tuple[float | None, float | None, float | None]:
    """p50, p99 and max in milliseconds; Nones when no round finished."""
    if not latencies:
        return None, None, None
    ordered = sorted(latencies)
    n = len(ordered)

    def pick(q: float) -> float:
        return ordered[min(n - 1, int(q * n))] * 1000.0

    return pick(0.50), pick(0.99), ordered[-1] * 1000.0


class LatencyWindows:
    """The latencies of the rounds finished since the previous `take()`, summarised, and
    their cumulative histogram. With numpy the ring is read through a view, never copied."""

    def __init__(self, stats: LoopStats, numpy: Any = None) -> None:
        self.stats = stats
        self.histogram = LatencyHistogram()
        self._seen = stats.rounds
        self._np = numpy
        self._ring = numpy.frombuffer(stats.latency_ring, dtype=numpy.float64) if numpy else stats.latency_ring

    def take(self) -> tuple[float | None, float | None, float | None, int]:
        """p50, p99, max (ms) of the new rounds, and how many rounds that was."""
        rounds = self.stats.rounds
        finished, self._seen = rounds - self._seen, rounds
        take = min(finished, RING)
        ring, start = self._ring, (rounds - take) & RING_MASK
        if start + take <= RING:
            window = ring[start : start + take]
        elif self._np is not None:
            window = self._np.concatenate((ring[start:], ring[: start + take - RING]))
        else:
            window = ring[start:] + ring[: start + take - RING]
        # Past SUMMARY_ROUNDS rounds a sample summarises an evenly spaced subsample: an idle
        # loop runs 300k rounds a second, and sorting them all would hold the GIL for
        # milliseconds, stalling the very loop it measures. The maximum stays exact.
        stride = max(1, -(-len(window) // SUMMARY_ROUNDS))
        ordered = sorted(window[::stride].tolist())
        p50, p99, worst = latency_summary(ordered)  # sorted input: Timsort only checks it
        if stride > 1:
            worst = float(window.max() if self._np is not None else max(window)) * 1000.0
        self.histogram.add_sorted(ordered, weight=stride)
        return p50, p99, worst, finished


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class ProcFile:
    """A /proc/self file the probe reads every sample, kept open and read with one pread: one
    system call, where open-read-close took three. Each call releases the GIL, and on a busy
    program getting it back means taking it from the program's thread, which then waits for it
    in turn: fewer calls, fewer such hand-overs. Opened again in a forked child (the kept file
    would read its parent's); `close()` gives it back, and a read after that opens and closes
    the file each time (a probe leaves no file open in a program it attached to), as every
    read of one made with `keep=False` does."""

    def __init__(self, path: str, size: int, keep: bool = True) -> None:
        self.path = path
        self.size = size
        self._fd: int | None = None
        self._pid = 0
        self._closed = not keep

    def read(self) -> bytes:
        if self._closed:
            with open(self.path, "rb") as fh:
                return fh.read(self.size)
        if self._fd is None or self._pid != os.getpid():
            self._give_back()  # (a forked child's copy of its parent's file)
            self._fd, self._pid = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC), os.getpid()
        try:
            return os.pread(self._fd, self.size, 0)
        except OSError:  # the program closed it under us (os.closerange): opened once more
            self._fd = None
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            return os.pread(self._fd, self.size, 0)

    def close(self) -> None:
        self._closed = True
        self._give_back()

    def _give_back(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


STATM = "/proc/self/statm"
STATM_BYTES = 256


def rss_bytes(statm: ProcFile) -> int | None:
    """This process's resident set size from /proc (what psutil reads too), or None."""
    try:
        return int(statm.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


SMAPS_ROLLUP = "/proc/self/smaps_rollup"
ROLLUP_BYTES = 16384  # (about 1 kB)
MEMORY_KINDS_HZ = 1.0  # a read walks every mapping of the process (about 10 ms in a torch rank): 1 Hz


@dataclass(frozen=True)
class MemoryKinds:
    """What RSS is made of, from the kernel's /proc/PID/smaps_rollup (Linux 4.14+)."""

    anon_bytes: int | None  # anonymous memory: heap, mmap'd without a file (a kept Work lives here)
    uss_bytes: int | None  # unique set size: pages only this process maps (Private_Clean + Private_Dirty)


def memory_kinds(rollup: ProcFile) -> MemoryKinds:
    """This process's anonymous memory and USS, from its smaps_rollup; None for what the
    kernel does not give."""
    try:
        text = rollup.read().decode("ascii", "replace")
    except OSError:
        return MemoryKinds(None, None)
    kb: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        fields = rest.split()
        if len(fields) == 2 and fields[1] == "kB" and fields[0].isdigit():
            kb[name] = int(fields[0])
    private = [kb.get("Private_Clean"), kb.get("Private_Dirty")]
    return MemoryKinds(
        anon_bytes=kb["Anonymous"] * 1024 if "Anonymous" in kb else None,
        uss_bytes=sum(private) * 1024 if None not in private else None,  # type: ignore[arg-type]
    )
