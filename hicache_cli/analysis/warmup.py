"""Where a traced program's memory has settled: the end of its warm-up, decided from its own
RSS. Pure.

hicache's own ranks run 10,000 rounds before their clock starts, so their transient is a few
seconds and stats.plateau_start finds its end (the first one-second window near the long-run
slope). A traced program starts cold: imports, the first batches, the allocator growing its
arenas in steps for tens of seconds. One flat second between two steps looked settled, the
steps after it went into the trend, and a pipelining trainer's warm-up was called a leak.

Here the warm-up lasts until the growth has *stayed* settled: windows of WINDOW_S (or a tenth
of the data, if longer), stepped by half a window, each with its least-squares slope (a step
counts: a robust slope would look through the very jumps that make a warm-up; the windows
are wide enough that one page more or less hardly moves it); the warm-up ends where the last
window ends whose slope is off the long run (the second half's Theil-Sen slope) by more than
the allowed band - twice the long run, or `tolerance` if larger. A steady leak is near its long run everywhere and keeps
the minimum; a process that climbs in steps and then flattens gets the end of its last step.
Never past `max_s` (`--warmup`, or half the data).
"""

from __future__ import annotations

from hicache_cli.analysis import stats

WINDOW_S = 2.0
WINDOW_SHARE = 0.1  # of the data's span, when that is longer than WINDOW_S


def settled_at(points: list[tuple[float, float]], min_s: float, max_s: float, tolerance: float) -> float:
    """The end of the warm-up for (time, RSS) points: see the module. `tolerance` in the
    points' units per second (the verdict's: half the leak threshold)."""
    if len(points) < stats.MIN_POINTS or max_s <= min_s:
        return min(min_s, max_s) if max_s > 0 else min_s
    span = points[-1][0] - points[0][0]
    tail = stats.theil_sen(points[len(points) // 2 :])
    long_run = tail.slope if tail else 0.0
    allowed = max(2.0 * abs(long_run), tolerance)
    window = max(WINDOW_S, WINDOW_SHARE * span)
    slopes = stats._WindowSlopes(points)  # noqa: SLF001 - the running sums plateau_start uses
    end, start = min_s, points[0][0]
    last = min(max_s, points[-1][0])  # a window starting past the data has no slope: a bound from a file may be 1e30
    while start < last:
        slope = slopes.between(start, start + window)
        if slope is not None and abs(slope - long_run) > allowed:
            end = start + window
        start += window / 2.0
    return min(max(end, min_s), max_s)
