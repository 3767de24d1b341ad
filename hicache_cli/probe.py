"""The per-rank probe: a thread that samples the rank on its own clock.

It never waits for the event loop, so a rank blocked in `wait()` or `recv()` keeps
reporting: its round age grows, which is how stalls show. It also enforces the end of
the run: at the deadline it asks the loop to stop, and if the loop is still blocked
after a short grace it writes the final line itself and ends the process.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

import numpy as np
import psutil

from hicache_cli.histogram import LatencyHistogram
from hicache_cli.sample import Sample

# SIGTERM/SIGINT: stop now (interrupted). SIGUSR2: the launcher ends the run early, as if
# the deadline had come (the verdict is settled).
EARLY_STOP = signal.SIGUSR2
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT, EARLY_STOP}


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


@dataclass
class Readings:
    """Readings from the cache side, gathered by a callable the rank provides."""

    depth: int = 0
    held_bytes: int = 0
    sent: int = 0
    received: int = 0
    blocked_on: str | None = None
    counters: dict[str, float] = field(default_factory=dict)
    digests: dict[str, int] = field(default_factory=dict)
    gpu_bytes: int | None = None  # CUDA memory the rank's tensors hold, on a GPU
    device_name: str | None = None  # "cpu" or the GPU model


def latency_summary(latencies: list[float]) -> tuple[float | None, float | None, float | None]:
    """p50, p99 and max in milliseconds; Nones when no round finished."""
    if not latencies:
        return None, None, None
    ordered = sorted(latencies)
    n = len(ordered)

    def pick(q: float) -> float:
        return ordered[min(n - 1, int(q * n))] * 1000.0

    return pick(0.50), pick(0.99), ordered[-1] * 1000.0


class Probe:
    def __init__(
        self,
        identity: RankIdentity,
        stats: LoopStats,
        read: Callable[[], Readings],
        out: IO[str],
        hz: float,
        started: float,
        deadline: float,
        stop_grace_s: float,
    ) -> None:
        self.identity = identity
        self.stats = stats
        self.read = read
        self.out = out
        self.interval = 1.0 / hz
        self.started = started  # time.monotonic() when the workload began
        self.deadline = deadline
        self.stop_grace_s = stop_grace_s
        self._process = psutil.Process()
        self._histogram = LatencyHistogram()
        self._rounds_seen = stats.rounds
        self._ring_view = np.frombuffer(stats.latency_ring, dtype=np.float64)  # no copy
        self._lock = threading.Lock()
        self._closed = False
        self.state = "running"
        self.stop_reason = "reached the deadline"
        self._thread = threading.Thread(target=self._run, name="hicache-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _rss(self) -> int | None:
        try:
            return int(self._process.memory_info().rss)
        except psutil.Error:
            return None

    def sample(self, kind: str = "sample", message: str | None = None) -> Sample:
        stats, ident = self.stats, self.identity
        window, finished = self._new_latencies()
        # Past SUMMARY_ROUNDS rounds a sample summarises an evenly spaced subsample: an idle
        # loop runs 300k rounds a second, and sorting them all would hold the GIL for
        # milliseconds, stalling the very loop it measures. The maximum stays exact.
        stride = max(1, -(-len(window) // SUMMARY_ROUNDS))
        ordered = sorted(window[::stride].tolist())
        p50, p99, worst = latency_summary(ordered)  # sorted input: Timsort only checks it
        if stride > 1:
            worst = float(window.max()) * 1000.0
        self._histogram.add_sorted(ordered, weight=stride)
        readings = self.read()
        now = time.monotonic()
        return Sample(
            t=round(now - self.started, 4),
            wall=time.time(),
            rank=ident.rank,
            pp_rank=ident.pp_rank,
            tp_rank=ident.tp_rank,
            pid=os.getpid(),
            state=self.state,
            rss_bytes=self._rss(),
            depth=readings.depth,
            held_bytes=readings.held_bytes,
            rounds=stats.rounds,
            lat_p50_ms=p50,
            lat_p99_ms=p99,
            lat_max_ms=worst,
            lat_count=finished,
            round_age_s=round(time.perf_counter() - stats.round_started, 6),
            sent=readings.sent,
            received=readings.received,
            blocked_on=readings.blocked_on,
            counters=readings.counters,
            lat_hist=self._histogram.to_json(),
            digests=readings.digests,
            gpu_bytes=readings.gpu_bytes,
            device_name=readings.device_name,
            node=ident.node,
            host=ident.host,
            kind=kind,
            message=message,
        )

    def _new_latencies(self) -> tuple[np.ndarray, int]:
        """Latencies of the rounds finished since the last sample (the newest RING of
        them, a view on the ring where it does not wrap), and how many rounds that was."""
        rounds = self.stats.rounds
        finished, self._rounds_seen = rounds - self._rounds_seen, rounds
        take = min(finished, RING)
        ring, start = self._ring_view, (rounds - take) & RING_MASK
        if start + take <= RING:
            return ring[start : start + take], finished
        return np.concatenate((ring[start:], ring[: start + take - RING])), finished

    def _write(self, sample: Sample) -> bool:
        with self._lock:
            if self._closed:
                return False
            self.out.write(sample.to_json() + "\n")
            self.out.flush()
            if sample.kind == "final":
                self._closed = True
            return True

    def finish(self, state: str, message: str | None = None) -> None:
        """Write the rank's final line (once); later calls do nothing."""
        self.state = state
        self._write(self.sample(kind="final", message=message))

    def _run(self) -> None:
        try:
            self._sample_until_stopped()
        except Exception:  # noqa: BLE001 - a rank without its probe could hang unseen: end it
            traceback.print_exc()
            self.finish("error", "the probe thread failed (see the rank's log)")
            os._exit(70)

    def _sample_until_stopped(self) -> None:
        next_at = time.monotonic()
        while True:
            next_at += self.interval
            info = signal.sigtimedwait(STOP_SIGNALS, max(0.0, next_at - time.monotonic()))
            if info is not None and info.si_signo == EARLY_STOP:
                self.deadline = min(self.deadline, time.monotonic())
                self.stop_reason = "stopped early: the verdict was settled"
            elif info is not None:
                self._stop_on_signal(info.si_signo)
                return
            now = time.monotonic()
            if now >= self.deadline and not self.stats.stop_requested:
                self.stats.stop_requested = True
                self.state = "stopping"
            if now >= self.deadline + self.stop_grace_s:
                self._end_blocked()
                return
            if not self._write(self.sample()):
                return
            if next_at < now:  # fell behind (e.g. starved of CPU): skip, do not burst
                next_at = now

    def _end_blocked(self) -> None:
        """The loop did not finish its last round in time: record where it is and leave."""
        blocked = self.read().blocked_on or "its event round"
        age = time.perf_counter() - self.stats.round_started
        self.finish("done", f"{self.stop_reason}; was blocked in {blocked} for {age:.1f} s")
        os._exit(0)

    def _stop_on_signal(self, signo: int) -> None:
        name = signal.Signals(signo).name
        if self.stats.stop_requested:
            self.finish("done", f"{name} received while stopping")
            os._exit(0)
        self.finish("interrupted", f"stopped by {name} before the deadline")
        os._exit(128 + signo)
