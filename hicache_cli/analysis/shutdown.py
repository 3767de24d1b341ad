"""Shutdown hazards of a traced program, from its processes' last lines. Pure.

A process that ended by itself (not stopped by hicache) holding send Works it never waited,
or having dropped them unwaited, may have left its peers waiting for messages that were
never delivered (tracer/hazards.py). Its final line's sites say which sends; a peer's last
samples say whether it is indeed blocked on it ("recv from rank 0 at x.py:17"): its last
line, or the one before a final line (the sender's exit closes the connection, and the
blocked receive then ends in an error).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hicache_cli.sample import Sample
from hicache_cli.tracer.hazards import unwaited_sends, unwaited_text
from hicache_cli.tracer.protocol import STOPPED_AT_END


@dataclass(frozen=True)
class Hazards:
    """One process's: the sends it ended with never waited, and what it is blocked in at the
    end when that is a peer that ended so."""

    unwaited_sends: tuple[dict[str, Any], ...] = ()
    blocked_in: str | None = None
    still_blocked: bool = False  # its last line is blocked (else the one before its final line was)

    def lines(self, rank: int) -> list[str]:
        out = [unwaited_text(f"rank {rank}", "ended", list(self.unwaited_sends))] if self.unwaited_sends else []
        if self.blocked_in is not None:
            out.append(f"rank {rank} {'is' if self.still_blocked else 'was'} blocked in {self.blocked_in}")
        return out


def ended_unwaited(series: list[Sample]) -> list[dict[str, Any]]:
    """The sends a process ended with never waited, if it ended by itself."""
    last = series[-1] if series else None
    if last is None or last.kind != "final" or last.sites is None or last.message == STOPPED_AT_END:
        return []
    return unwaited_sends(last.sites)


def hazards(samples: Mapping[int, list[Sample]]) -> dict[int, Hazards]:
    """Per rank file: its hazards (only those with any)."""
    ended = {slot: sends for slot, series in samples.items() if (sends := ended_unwaited(series))}
    ended_ranks = {samples[slot][-1].rank for slot in ended}
    out = {}
    for slot, series in samples.items():
        if not series:
            continue
        where = next((s for s in reversed(series[-2:]) if s.blocked_on and s.blocked_peer in ended_ranks), None)
        if slot in ended or where is not None:
            blocked = where.blocked_on if where is not None else None
            out[slot] = Hazards(tuple(ended.get(slot, ())), blocked, where is series[-1])
    return out
