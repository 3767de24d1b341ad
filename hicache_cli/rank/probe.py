"""The per-rank probe: a thread that samples the rank on its own clock.

It never waits for the event loop, so a rank blocked in `wait()` or `recv()` keeps
reporting: its round age grows, which is how stalls show. It also enforces the end of
the run: at the deadline it asks the loop to stop, and if the loop is still blocked
after a short grace it writes the final line itself and ends the process.

Stdlib only (numpy when given): `hicache trace` runs a subclass inside other programs.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Collection
from typing import IO, Any

from hicache_cli.lifecycle import Lifeline
from hicache_cli.protocol import EARLY_STOP, LIFELINE_EVERY_S, ORPHANED_EXIT, STOP_SIGNALS
from hicache_cli.rank.loop_stats import (  # noqa: F401 - re-exported: the probe's vocabulary
    MEMORY_KINDS_HZ,
    RING,
    RING_MASK,
    ROLLUP_BYTES,
    SMAPS_ROLLUP,
    STATM,
    STATM_BYTES,
    SUMMARY_ROUNDS,
    LatencyWindows,
    LoopStats,
    ProcFile,
    RankIdentity,
    Readings,
    latency_summary,
    memory_kinds,
    rss_bytes,
)
from hicache_cli.sample import LineEncoder, Sample


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
        lifeline: Lifeline | None = None,
        numpy: Any = None,
    ) -> None:
        self.identity = identity
        self.stats = stats
        self.read = read
        self.out = out
        self.interval = 1.0 / hz
        self.started = started  # time.monotonic() when the workload began
        self.deadline = deadline
        self.stop_grace_s = stop_grace_s
        self._windows = LatencyWindows(stats, numpy)
        # memory kinds cost a walk of every mapping: every this many samples, and in the final line
        self._kinds_every = max(1, round(hz / MEMORY_KINDS_HZ))
        self._statm, self._rollup = ProcFile(STATM, STATM_BYTES), ProcFile(SMAPS_ROLLUP, ROLLUP_BYTES)
        self._taken = 0
        self._lock = threading.Lock()
        self._encoder = LineEncoder()  # compact lines: what changed, a whole line now and then
        self._closed = False
        self.state = "running"
        self.stop_reason = "reached the deadline"
        self.lifeline = lifeline
        self._thread = threading.Thread(target=self._run, name="hicache-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def sample(
        self,
        kind: str = "sample",
        message: str | None = None,
        signal_name: str | None = None,
        error: tuple[str, int | None] | None = None,
    ) -> Sample:
        stats, ident = self.stats, self.identity
        p50, p99, worst, finished = self._windows.take()
        readings = self.read()
        kinds = memory_kinds(self._rollup) if kind == "final" or self._taken % self._kinds_every == 0 else None
        self._taken += 1
        now = time.monotonic()
        return Sample(
            t=round(now - self.started, 4),
            wall=time.time(),
            rank=ident.rank,
            pp_rank=ident.pp_rank,
            tp_rank=ident.tp_rank,
            pid=os.getpid(),
            state=self.state,
            rss_bytes=rss_bytes(self._statm),
            depth=readings.depth,
            held_bytes=readings.held_bytes,
            rounds=stats.rounds,
            lat_p50_ms=_ms(p50),
            lat_p99_ms=_ms(p99),
            lat_max_ms=_ms(worst),
            lat_count=finished,
            round_age_s=round(self.round_age(), 6),
            sent=readings.sent,
            received=readings.received,
            blocked_on=readings.blocked_on,
            blocked_peer=readings.blocked_peer,
            loop_thread=stats.thread,
            counters=readings.counters,
            lat_hist=self._windows.histogram.to_json(),
            digests=readings.digests,
            gpu_bytes=readings.gpu_bytes,
            device_name=readings.device_name,
            anon_bytes=kinds.anon_bytes if kinds else None,
            uss_bytes=kinds.uss_bytes if kinds else None,
            works=readings.works,
            sites=readings.sites,
            peers=readings.peers,
            holders=readings.holders,
            node=ident.node,
            host=ident.host,
            world=ident.world,
            kind=kind,
            message=message,
            signal=signal_name,
            error_kind=error[0] if error else None,
            error_peer=error[1] if error else None,
        )

    def round_age(self) -> float:
        return time.perf_counter() - self.stats.round_started

    def _write(self, sample: Sample) -> bool:
        with self._lock:
            if self._closed:
                return False
            self.out.write(self._encoder.encode(sample, time.monotonic()) + "\n")
            self.out.flush()
            if sample.kind == "final":
                self._closed = True
            return True

    def finish(
        self,
        state: str,
        message: str | None = None,
        signal_name: str | None = None,
        error: tuple[str, int | None] | None = None,
    ) -> None:
        """Write the rank's final line (once); later calls do nothing. The probe thread (a stop
        signal) and the loop (its error) may both finish at once: the first one's state,
        message and signal make the line, never a mix of the two."""
        with self._lock:
            if self._closed:
                return
            self.state = state
            final = self.sample(kind="final", message=message, signal_name=signal_name, error=error)
            self._statm.close()
            self._rollup.close()
            self.out.write(self._encoder.encode(final, time.monotonic()) + "\n")
            self.out.flush()
            self._closed = True

    def _run(self) -> None:
        try:
            self._sample_until_stopped()
        except Exception:  # noqa: BLE001 - a rank without its probe could hang unseen: end it
            traceback.print_exc()
            self.finish("error", "the probe thread failed (see the rank's log)")
            os._exit(70)

    def _sample_until_stopped(self) -> None:
        next_at = time.monotonic()
        check_lifeline_at = next_at + LIFELINE_EVERY_S
        while True:
            next_at += self.interval
            signo = wait_for_signal(STOP_SIGNALS, max(0.0, next_at - time.monotonic()))
            if signo == EARLY_STOP:
                self.deadline = min(self.deadline, time.monotonic())
                self.stop_reason = "stopped early: the verdict was settled"
            elif signo is not None:
                self._stop_on_signal(signo)
                return
            now = time.monotonic()
            if self.lifeline is not None and now >= check_lifeline_at:
                check_lifeline_at = now + LIFELINE_EVERY_S
                if (lost := self.lifeline.lost()) is not None:
                    self._stop_orphaned(lost)
                    return
            if now >= self.deadline and not self.stats.stop_requested:
                self._deadline_reached()
            if now >= self.deadline + self.stop_grace_s:
                self._end_blocked()
                return
            if not self._write(self.sample()):
                return
            if next_at < now:  # fell behind (e.g. starved of CPU): skip, do not burst
                next_at = now

    def _deadline_reached(self) -> None:
        """Ask the loop to stop, and say so in the samples: `stopping`, unless the final line
        is being written or was (the loop can end at its own clock's deadline first: a
        `stopping` taken into its final line would read as a rank that never finished)."""
        self.stats.stop_requested = True
        with self._lock:
            if not self._closed:
                self.state = "stopping"

    def _end_blocked(self) -> None:
        """The loop did not finish its last round in time: record where it is and leave."""
        blocked = self.read().blocked_on or "its event round"
        age = time.perf_counter() - self.stats.round_started
        self.finish("done", f"{self.stop_reason}; was blocked in {blocked} for {age:.1f} s")
        os._exit(0)

    def _stop_on_signal(self, signo: int) -> None:
        name = signal.Signals(signo).name
        if self.stats.stop_requested:
            self.finish("done", f"{name} received while stopping", name)
            os._exit(0)
        self.finish("interrupted", f"stopped by {name} before the deadline", name)
        os._exit(128 + signo)

    def _stop_orphaned(self, why: str) -> None:
        """Left behind (hicache or torchrun killed): record it and leave, never run on unwatched."""
        self.finish("interrupted", f"stopped before the deadline: {why}")
        os._exit(ORPHANED_EXIT)


# siginfo's si_code of a signal someone sent (kill, sigqueue, tgkill) or the kernel raised
# (a terminal's Ctrl-C or hang-up): the only ways a stop signal reaches a rank.
SI_USER, SI_QUEUE, SI_TKILL, SI_KERNEL = 0, -1, -6, 0x80
SENT_CODES = (SI_USER, SI_QUEUE, SI_TKILL)


def plausible(info: Any, signals: Collection[int]) -> bool:
    """Whether a siginfo sigtimedwait returned is a signal that was delivered: one of the
    waited set, sent by a process (its pid and uid) or raised by the kernel. On some kernels
    (this VM's Linux 6.18) a ptrace attach and detach (gdb, `hicache attach` into this
    process) makes a wait in progress return a siginfo nothing filled in: si_signo 0 or
    stack garbage (docs/attach.md)."""
    if info.si_signo not in signals:
        return False
    if info.si_code == SI_KERNEL:
        return True
    return info.si_code in SENT_CODES and info.si_pid > 0 and info.si_uid >= 0


def wait_for_signal(signals: Collection[int], timeout_s: float) -> int | None:
    """signal.sigtimedwait that returns only a delivered signal (its number), or None once
    `timeout_s` has passed; a bogus wake-up (not `plausible`) goes on waiting."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = signal.sigtimedwait(signals, max(0.0, deadline - time.monotonic()))
        if info is None:
            return None
        if plausible(info, signals):
            return int(info.si_signo)
        if time.monotonic() >= deadline:
            return None


def _ms(value: float | None) -> float | None:
    """Milliseconds to 0.1 us: what a clock read around a round can tell, and 6 digits fewer."""
    return None if value is None else round(value, 4)
