"""Deciding, from the samples alone, that a rank is stuck; and reading its stack dump.

A rank is *stalled* when its probe still samples but its current round has run longer
than the stall timeout (blocked in recv or wait()); it *hangs* when its probe has stopped
sampling altogether. Both are read off the run directory, as everything else is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hicache_cli.sample import Sample


@dataclass(frozen=True)
class Stall:
    rank: int
    pid: int
    kind: str  # "stall" | "hang"
    message: str
    since_t: float  # run time at which the rank stopped making progress
    waiting_on_pp: int | None = None  # the pipeline stage it is blocked on, if it says


def find_stalls(
    samples: dict[int, list[Sample]], now_wall: float, stall_timeout_s: float, hang_after_s: float
) -> list[Stall]:
    stalls = []
    for rank, series in sorted(samples.items()):
        if not series:
            continue
        last = series[-1]
        if last.kind == "final" or last.state != "running":
            continue  # finished, or past its deadline: the probe ends it on its own
        silent = now_wall - last.wall
        age = last.round_age_s + max(0.0, silent)
        if silent > hang_after_s:
            message = f"rank {rank} stopped sampling {silent:.1f} s ago (process unresponsive)"
            stalls.append(Stall(rank, last.pid, "hang", message, last.t))
        elif age >= stall_timeout_s:
            message = f"rank {rank} blocked in {last.blocked_on or 'its event round'} for {age:.1f} s"
            since = last.t - last.round_age_s
            stalls.append(Stall(rank, last.pid, "stall", message, since, last.blocked_peer))
    return stalls


_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_THREAD = re.compile(r"^(?:Current thread|Thread) 0x(?P<ident>[0-9a-fA-F]+)")


def blocked_frame(dump: str, loop_thread: int | None) -> str | None:
    """The innermost frame of the thread running the event loop, from a faulthandler dump:
    the block of the thread the rank's samples name (`loop_thread`, the ident faulthandler
    prints), whatever its functions are called."""
    if loop_thread is None:
        return None
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump):
        head = _THREAD.match(block.lstrip())
        if head is None or int(head["ident"], 16) != loop_thread:
            continue
        frames = [m for m in (_FRAME.match(line) for line in block.splitlines()) if m]
        if frames:
            top = frames[0]
            return f"{top['func']} ({Path(top['file']).name}:{top['line']})"
    return None
