"""Drain policies: when and how the outstanding PP-sync sends are waited on and released.

Each policy is a small strategy object with two hooks the HiCache event round calls: at
the start of the round (before any count is exchanged) and at its end. The registry is
the single list of policies; the CLI's choices come from it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

from hicache_model.work_list import WaitTimedOut, WorkList


@dataclass(frozen=True)
class PolicyOptions:
    wait_timeout_s: float = 5.0  # bounded-drain: longest a round's drain may wait
    watermark: int = 1024  # adaptive: list length that triggers reaping
    watermark_cap: int = 32768
    probe_timeout_s: float = 0.001  # adaptive: how long to wait on one Work
    max_reap_per_call: int = 512


class DrainPolicy:
    name: ClassVar[str]
    # True when write and load counts travel in one message per round.
    batched: ClassVar[bool] = False
    # True when a rank skips the whole sync in rounds it has no copy in flight.
    skip_sync_when_idle: ClassVar[bool] = False
    # backend -> why the policy cannot work there by design (compare-policies does not run
    # it on that backend and says why, rather than listing a failure)
    unsupported_backends: ClassVar[dict[str, str]] = {}

    def __init__(self, options: PolicyOptions) -> None:
        self.options = options

    def at_round_start(self, works: WorkList) -> None:
        pass

    def at_round_end(self, works: WorkList) -> None:
        pass

    def counters(self) -> dict[str, float]:
        return {}


POLICIES: dict[str, type[DrainPolicy]] = {}


def register(cls: type[DrainPolicy]) -> type[DrainPolicy]:
    POLICIES[cls.name] = cls
    return cls


class UnknownPolicy(ValueError):
    pass


def make_policy(name: str, options: PolicyOptions | None = None) -> DrainPolicy:
    try:
        cls = POLICIES[name]
    except KeyError:
        raise UnknownPolicy(f"unknown policy {name!r}; choose one of: {', '.join(POLICIES)}") from None
    return cls(options or PolicyOptions())


def not_applicable(name: str, backend: str) -> str | None:
    """Why policy `name` cannot work on `backend` by design; None when it can."""
    return POLICIES[name].unsupported_backends.get(backend)


def describe(name: str) -> str:
    """First line of a policy's docstring, for help texts and docs."""
    return (POLICIES[name].__doc__ or "").strip().splitlines()[0]


@register
class Reap(DrainPolicy):
    """Legacy: drop the prefix of Works whose is_completed() is true, at round end.

    SGLang PR #27285 (`_reap_completed_async_work`). Never blocks. On gloo a send's
    is_completed() stays false until wait() is called, so nothing is ever freed and the
    list, with every cloned payload, grows each round: the leak of issue #28902.
    """

    name = "reap"

    def at_round_end(self, works: WorkList) -> None:
        while len(works) and works.head().work.is_completed():
            works.popleft()


@register
class Drain(DrainPolicy):
    """The fix: wait() on every outstanding Work at round start, then clear the list.

    SGLang PR #28916 (`_drain_async_work`). The list never holds more than one round's
    sends and a slow downstream rank slows PP0 down (backpressure). Trades latency: the
    loop blocks on the slowest receiver; a receiver that never posts its recv parks the
    rank until gloo's timeout (hours); if wait() raises, the list is not cleared.
    """

    name = "drain"

    def at_round_start(self, works: WorkList) -> None:
        for send in works:
            works.wait(send, where=self.name)
        works.clear()


@register
class BoundedDrain(DrainPolicy):
    """Drain with a deadline and try/finally: a stuck receiver becomes a clear error.

    The later fork's answer to the fix's open risks: the round's waits together take at
    most --wait-timeout, the error names the peer rank and how long it waited, and the
    list is cleared whatever happens. Trades: a slow-but-alive receiver past the timeout
    is treated as dead (on gloo the timed-out connection is closed).
    """

    name = "bounded-drain"

    def at_round_start(self, works: WorkList) -> None:
        deadline = time.monotonic() + self.options.wait_timeout_s
        try:
            for send in works:
                works.wait(send, timeout_s=max(deadline - time.monotonic(), 0.001), where=self.name)
        finally:
            works.clear()


@register
class Adaptive(DrainPolicy):
    """Watermark reaper (FlexKV): past a watermark, wait briefly on the oldest Works.

    When the list passes the watermark (start 1024) it waits 1 ms on each of the oldest
    Works, at most 512 per call; a head that does not complete doubles the watermark
    (cap 32768), a clean pass halves it (not below the start). Trades a bounded but
    large list for a loop that rarely blocks. On gloo a timed-out wait closes the
    connection to the peer, so a head that is merely late is fatal there.
    """

    name = "adaptive"
    unsupported_backends: ClassVar[dict[str, str]] = {
        "gloo": "its 1 ms timed wait() times out on a send not yet received, and gloo closes the pair "
        "on a timed-out wait, so the next send fails (run it with --pp-backend nccl)"
    }

    def __init__(self, options: PolicyOptions) -> None:
        super().__init__(options)
        self.watermark = options.watermark
        self.stuck_heads = 0

    def at_round_end(self, works: WorkList) -> None:
        if len(works) <= self.watermark:
            return
        opts = self.options
        for _ in range(min(opts.max_reap_per_call, len(works))):
            try:
                works.wait(works.head(), timeout_s=opts.probe_timeout_s, where=self.name)
            except WaitTimedOut:
                self.stuck_heads += 1
                self.watermark = min(self.watermark * 2, opts.watermark_cap)
                return
            works.popleft()
        self.watermark = max(self.watermark // 2, opts.watermark)

    def counters(self) -> dict[str, float]:
        return {"watermark": self.watermark, "stuck_heads": self.stuck_heads}


@register
class Batched(Drain):
    """Write and load counts in one int32[2] message per round, drained like `drain`.

    SGLang PR #33473: half the PP-sync messages and half the Works per round (+37%
    throughput on a 32K-token prefill workload). Same blocking trade-offs as `drain`.
    """

    name = "batched"
    batched = True


@register
class IdleSkip(Reap):
    """Reap, but skip the sync entirely in rounds with no write or load in flight.

    A reporter's quick patch on issue #28902: an idle server stops sending, so it stops
    leaking while idle (busy rounds still leak as under `reap`). Each rank decides from
    its own state, with nothing to keep the stages agreeing on which rounds were skipped;
    the report's pp_consistency check shows whether they diverged.
    """

    name = "idle-skip"
    skip_sync_when_idle = True
