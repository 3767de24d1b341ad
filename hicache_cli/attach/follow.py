"""`hicache attach --follow`: staying attached to a serving process at a cost it cannot measure.

The agent of a plain attach puts the tracer's hooks on every Work for as long as it is
attached: what a diagnosis needs, 2-13% of a tight loop's rounds (docs/performance.md). A
follow is meant to stay for days, so between two findings it hooks nothing:

1. **A census every `every_s`** (census.py: chunked, the GIL held a few milliseconds at a
   time, its snapshot too on a big or frozen heap: heap.py), or less often where one census
   would take more than CPU_SHARE of a core: how many Works each holder keeps. That count is the
   probe's `depth`, and the holders go into the sample line (`holders`), so the report, the
   dashboard and `--metrics-port` read them as they read everything else.
2. **Growth, by holder.** A holder whose count set a new high in each of the last GROWING
   censuses, by MIN_GROWTH Works in all, is growing: a bounded population stops making new
   highs however it fluctuates; a leak never does. A holder whose count went past every
   count before it by MIN_GROWTH Works, early in such a run (not yet GROWING new highs), is
   *rising*: the next census comes `every_s` after, not at the spaced-out interval, so that
   where a census is dear (a slow machine, a big heap: a minute between two) a leak is told
   growing seconds after its first new high, not minutes. At most GROWING - 1 censuses a run
   are hurried so; a bounded population stops going past its peak once its range is seen.
   A holder first found after the first census held none at the census before: a leak that
   starts in a new container is rising at its first count.
   Between censuses the agent reads the Python heap's size, `sys.getallocatedblocks()`
   (20 us on a rank with torch loaded, 0.56 M blocks; 42 us at 3.6 M), five times a
   second; a Work kept costs two or three blocks (its object, a dict's key). A heap past
   its high at the censuses by NUDGE_BLOCKS brings the next census forward (never nearer
   than `every_s` to the last), so that a leak that starts between two spaced-out censuses
   is counted seconds after it starts, not up to an interval later (72 s on a 0.17 M-object
   relay). A heap that grows for other reasons (a cache filling) costs one census per
   doubling of the step: a nudged census that finds no holder rising doubles it; a census
   that finds the heap no higher than its high halves it again (down to NUDGE_BLOCKS), as
   does each `every_s` the heap stands still between censuses (a trainer's heap grows while
   it warms up, then stops: where censuses are minutes apart, a leak that starts after the
   warm-up would otherwise have to cross the step the warm-up left). And
   a census is brought forward only while the censuses of the last NUDGE_WINDOW_S, with one
   more, stay within NUDGE_SHARE of a core: on a big heap (4 s of CPU a census at 3 M
   objects) a server filling its caches is not censused over and over.
3. **The line, only when something grows.** The tracer's hooks go on for `window_s`
   (tracer/works.py); every Work made meanwhile is known by its creation site. The next
   census finds those Works in their holder and names the line. Then the hooks come off and
   the table is forgotten. A holder the window could not explain (its Works made in C++, or
   none made meanwhile) gets another window after RETRY_CENSUSES.

Stdlib only (it runs inside the target); the census, the hooks and the clock are passed in.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from hicache_cli.attach.protocol import Census, Holder

GROWING = 3  # new highs in a row that make a holder growing
MIN_GROWTH = 16  # ... and the Works it gained over them, at least
HISTORY = 16  # censuses kept per holder (for its rate)
RETRY_CENSUSES = 4  # a growing holder still without a line gets another window after this many
# The censuses' share of a core, at most: where one census costs more CPU than every_s allows,
# the next one waits longer. A census costs about 0.4-1 s of CPU per million tracked objects
# here (0.06 s on a 0.17 M-object loop, 0.18-0.28 s on a 0.29 M-object pipelining trainer:
# counted every ~2 minutes; a 3 M-object heap every 15 minutes), and holds the GIL for most of
# it. A quarter of a percent: on a trainer whose two ranks fill both cores and wait for each
# other, each rank's census stalls both, and the sidecar's and probes' own share comes on top
# (docs/performance.md); a rising holder hurries the next censuses (Trend.rising).
CPU_SHARE = 0.0025
NUDGE_BLOCKS = 1024  # Python heap blocks past their high at the censuses that bring the next census forward
NUDGE_SHARE = 0.01  # ... while the censuses' CPU over the last NUDGE_WINDOW_S stays within this share of a core
NUDGE_WINDOW_S = 600.0
FLAT_BLOCKS = NUDGE_BLOCKS // 4  # a heap that grew by less over every_s stood still
SITES_PER_HOLDER = 3


def census_interval(every_s: float, cpu_s: float) -> float:
    """How long after a census of `cpu_s` the next one comes: every_s, or longer where that
    would take more than CPU_SHARE of a core."""
    return max(every_s, cpu_s / CPU_SHARE)


@dataclass
class Trend:
    """One holder's counts over the last censuses, and the lines that made its Works."""

    counts: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=HISTORY))
    highs: int = 0  # new highs in a row, up to the last census
    sites: list[list[Any]] = field(default_factory=list)  # [file, line, function, works]
    unexplained: int = 0  # censuses since a window that did not name its line
    peak: int | None = None  # the most Works it held at any census
    jump: int = 0  # how far the last census went past the peak before it (0: it did not)

    def add(self, at: float, works: int) -> None:
        best = max((n for _, n in self.counts), default=None)
        self.highs = self.highs + 1 if best is not None and works > best else 0
        self.counts.append((at, works))
        self.jump = works - self.peak if self.peak is not None and works > self.peak else 0
        self.peak = works if self.peak is None else max(self.peak, works)

    @property
    def growing(self) -> bool:
        if self.highs < GROWING:
            return False
        recent = list(self.counts)[-GROWING - 1 :]
        return recent[-1][1] - recent[0][1] >= MIN_GROWTH

    @property
    def rising(self) -> bool:
        """The last census went past every count before it by MIN_GROWTH Works, early in a
        run of new highs (not yet GROWING of them)."""
        return self.jump >= MIN_GROWTH and self.highs < GROWING  # (a jump is a new high too)

    @property
    def per_hour(self) -> float | None:
        """Works gained per hour over the history (None with fewer than two censuses)."""
        if len(self.counts) < 2:
            return None
        (t0, n0), (t1, n1) = self.counts[0], self.counts[-1]
        return (n1 - n0) * 3600.0 / (t1 - t0) if t1 > t0 else None


@dataclass(frozen=True)
class Hooks:
    """The tracer's hooks, put on and taken off by the agent; `site_of(work)` says where a
    Work made while they were on was created: (file, line, function), else None."""

    on: Callable[[], None]
    off: Callable[[], None]
    site_of: Callable[[Any], tuple[str, int, str] | None]
    forget: Callable[[], None]


class Follower:
    """The follow loop's state; `due(now)` says when to take the next census, `took(census)`
    what to do with one, `tick(now)` closes a window that has run its time."""

    def __init__(self, every_s: float, window_s: float, hooks: Hooks, clock: Callable[[], float] = time.monotonic):
        self.every_s = every_s
        self.interval = every_s  # the census interval now: every_s, or longer where a census costs more
        self.window_s = window_s
        self.hooks = hooks
        self.clock = clock
        self.trends: dict[str, Trend] = {}
        self.latest: Census | None = None
        self.census_at: float | None = None  # when the latest census was taken (the clock's time)
        self.fresh = False  # a census whose holder lines are not made yet
        self._lines: list[dict[str, Any]] | None = None
        self.next_at = clock()
        self.window_until: float | None = None  # hooks on until then
        self.explaining = False  # hooks came off; the next census attributes what they saw
        self.windows = 0
        self.blocks: int | None = None  # the heap's latest size (sys.getallocatedblocks)
        self.blocks_high: int | None = None  # ... its high at the censuses
        self.nudge_step = NUDGE_BLOCKS
        self.still: tuple[float, int] | None = None  # since when the heap stands still, and its size then
        self.nudged = False  # the next census was brought forward by the heap
        self.nudges = 0
        self.spent: deque[tuple[float, float]] = deque()  # (when, CPU seconds) of each census

    def due(self) -> bool:
        return self.clock() >= self.next_at

    def site_of(self) -> Callable[[Any], tuple[str, int, str] | None] | None:
        """For the census: the creation site of a Work, while a window's table is kept."""
        return self.hooks.site_of if (self.window_until is not None or self.explaining) else None

    def took(self, census: Census, last: bool = False) -> None:
        """A census was taken: the trends updated, the lines it found kept, and a window
        opened when a holder grows that no line explains yet (not after the `last`, taken
        at detach: its count is the probe's final line's)."""
        now = self.clock()
        self.interval = census_interval(self.every_s, census.cost.cpu_s)
        self.spent.append((now, census.cost.cpu_s))
        while self.spent[0][0] < now - NUDGE_WINDOW_S:  # kept for the window only: a follow lasts days
            self.spent.popleft()
        if census.cost.truncated and not last:  # cut short (its budget; heap.py's walk of the frozen objects
            self.next_at = now + self.every_s  # failed): its counts are not a population's, and would break a
            return  # run of new highs
        seen = set()
        for holder in census.holders:
            trend = self.trends.get(holder.path)
            if trend is None:
                trend = self.trends[holder.path] = Trend()
                if self.census_at is not None:  # not there at the census before: it held none then
                    trend.add(self.census_at, 0)  # (a leak that starts in a new holder is rising at once)
            trend.add(now, holder.works)
            seen.add(holder.path)
            if holder.sites:
                trend.sites, trend.unexplained = [list(s) for s in holder.sites[:SITES_PER_HOLDER]], 0
            elif trend.unexplained:
                trend.unexplained += 1
        for path, trend in self.trends.items():
            if path not in seen:
                trend.add(now, 0)
        if self.explaining:  # the window's Works were looked for in their holders: done with them
            self.explaining = False
            self.hooks.forget()
            for trend in self.trends.values():
                if trend.growing and not trend.sites:
                    trend.unexplained = 1
        self.latest, self.fresh, self.census_at = census, True, now
        if last:
            return
        rising = any(t.rising and not t.sites for t in self.trends.values())
        self._step_nudges(rising)
        self.next_at = now + (self.every_s if rising else self.interval)
        if self.window_until is None and not self.explaining and self._wants_window():
            self.hooks.on()
            self.windows += 1
            self.window_until = now + self.window_s

    def heap(self, blocks: int) -> None:
        """The Python heap's size between censuses: past its high at the censuses by the
        nudge step, the next census comes now, or every_s after the last (not during a
        window: its census comes anyway); standing still for every_s, the step is halved."""
        self.blocks = blocks
        high, last = self.blocks_high, self.census_at
        if high is None:  # the first reading: the heap as the follow found it
            self.blocks_high = blocks
            return
        now = self.clock()
        if self.still is None or blocks > self.still[1] + FLAT_BLOCKS:
            self.still = (now, blocks)
        elif now - self.still[0] >= self.every_s:  # it stood still: the step comes down again
            self.nudge_step, self.still = max(NUDGE_BLOCKS, self.nudge_step // 2), (now, blocks)
        if last is None or self.nudged or self.window_until is not None or self.explaining:
            return
        soonest = max(now, last + self.every_s)
        if blocks >= high + self.nudge_step and self.next_at > soonest and self._affordable():
            self.next_at, self.nudged = soonest, True
            self.nudges += 1

    def _affordable(self) -> bool:
        """One more census (as dear as the last) keeps the last NUDGE_WINDOW_S's censuses
        within NUDGE_SHARE of a core."""
        since = self.clock() - NUDGE_WINDOW_S
        spent = sum(cpu for at, cpu in self.spent if at >= since)
        return spent + (self.spent[-1][1] if self.spent else 0.0) <= NUDGE_SHARE * NUDGE_WINDOW_S

    def _step_nudges(self, rising: bool) -> None:
        """After a census: a nudge that found nothing rising doubles the step, a heap no
        higher than its high halves it; the high is the heap's now, if higher."""
        if self.blocks is None:
            return
        if self.nudged and not rising:
            self.nudge_step *= 2
        elif self.blocks_high is not None and self.blocks <= self.blocks_high:
            self.nudge_step = max(NUDGE_BLOCKS, self.nudge_step // 2)
        self.blocks_high = max(self.blocks, self.blocks_high or 0)
        self.nudged = False

    def tick(self) -> None:
        """Close a window that has run its time: the hooks off; the next census, taken at
        once, attributes the Works the window saw made."""
        if self.window_until is not None and self.clock() >= self.window_until:
            self.hooks.off()
            self.window_until = None
            self.explaining = True
            self.next_at = self.clock()

    def close(self) -> None:
        if self.window_until is not None:
            self.hooks.off()
            self.window_until = None
        if self.explaining or self.windows:
            self.hooks.forget()
        self.explaining = False

    def _wants_window(self) -> bool:
        return any(
            t.growing and not t.sites and (t.unexplained == 0 or t.unexplained > RETRY_CENSUSES)
            for t in self.trends.values()
        )

    def holder_lines(self) -> list[dict[str, Any]] | None:
        """The sample's `holders`: each holder of the latest census with its trend; the same
        list object until the next census (the line encoder writes it only when it changes)."""
        if self.fresh and self.latest is not None:
            self._lines = [holder_line(h, self.trends.get(h.path)) for h in self.latest.holders]
            self.fresh = False
        return self._lines

    def explained(self, census: Census) -> Census:
        """The census as written for hicache: each holder with the lines found for it so far."""
        holders = [
            replace(h, sites=[list(s) for s in t.sites]) if (t := self.trends.get(h.path)) and t.sites else h
            for h in census.holders
        ]
        return replace(census, holders=holders)


def holder_line(holder: Holder, trend: Trend | None) -> dict[str, Any]:
    per_hour = trend.per_hour if trend is not None else None
    return {
        "path": holder.path,
        "container": holder.container,
        "works": holder.works,
        "completed": holder.completed,
        "named": holder.named,
        "per_hour": round(per_hour, 1) if per_hour is not None else None,
        "growing": bool(trend and trend.growing),
        "sites": [list(s) for s in trend.sites] if trend is not None else [],
    }
