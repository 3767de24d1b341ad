"""Shutdown hazards of a traced program, from its processes' last lines. Pure.

A process that ended by itself (not stopped by hicache) holding send Works it never waited,
or having dropped them unwaited, may have left its peers waiting for messages that were
never delivered: on gloo a send whose Work is dropped unwaited may never be delivered, and its
receiver then waits forever in `recv` (a race: whether the message happened to arrive does not
matter). Its final line's sites say which sends; a peer's last
samples say whether it is indeed blocked on it ("recv from rank 0 at x.py:17") and stayed so
past the sender's end: its last sample before its final line is blocked on the sender, and
either a sample taken after the sender's end still is, or its final line came after that end
and was no normal one (the sender's exit closes the connection, and the blocked receive then
ends in an error). A peer that ended normally is never one, even when its last sample caught
it in `recv` - a receive loop spends most of its time there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hicache_cli.protocol import DETACHED_PREFIX, STOPPED_AT_END
from hicache_cli.sample import Sample

SEND_OPS = frozenset({"send", "isend", "batch_isend_irecv(isend)"})


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


def unwaited_sends(sites: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Send sites with Works never seen complete (created less completed: held, or dropped
    without a wait), most first: {peer, count, file, line, function, op}."""
    out = []
    for site in sites:
        count = int(site.get("created", 0)) - int(site.get("completed", 0))
        if site.get("op") in SEND_OPS and count > 0:
            keys = ("peer", "file", "line", "function", "op")
            out.append({"count": count, **{k: site.get(k) for k in keys}})
    return sorted(out, key=lambda s: (-s["count"], str(s["file"]), s["line"] or 0))


def unwaited_text(who: str, verb: str, sends: list[dict[str, Any]]) -> str:
    """`rank 0 returned with 1 send to rank 1 never waited (test_x.py:15)`; several sites
    are listed, most first."""
    parts = []
    for s in sends:
        noun = "send" if s["count"] == 1 else "sends"
        where = f"{os.path.basename(str(s['file']))}:{s['line']}"
        parts.append(f"{s['count']} {noun} to rank {s['peer']} never waited ({where})")
    return f"{who} {verb} with {', '.join(parts)}"


def ended_unwaited(series: list[Sample]) -> list[dict[str, Any]]:
    """The sends a process ended with never waited, if it ended by itself (not stopped by
    hicache at the end of a trace, nor detached from by hicache attach: it goes on)."""
    last = series[-1] if series else None
    if last is None or last.kind != "final" or last.sites is None:
        return []
    if last.message == STOPPED_AT_END or (last.message or "").startswith(DETACHED_PREFIX):
        return []
    return unwaited_sends(last.sites)


def hazards(samples: Mapping[int, list[Sample]]) -> dict[int, Hazards]:
    """Per rank file: its hazards (only those with any)."""
    ended = {slot: sends for slot, series in samples.items() if (sends := ended_unwaited(series))}
    # (world, rank) -> when it ended: a rank number names a process only within its world
    ends = {(samples[slot][-1].world, samples[slot][-1].rank): samples[slot][-1].wall for slot in ended}
    out = {}
    for slot, series in samples.items():
        if not series:
            continue
        where = _stayed_blocked(series, ends)
        if slot in ended or where is not None:
            blocked = where.blocked_on if where is not None else None
            out[slot] = Hazards(tuple(ended.get(slot, ())), blocked, where is series[-1])
    return out


def _stayed_blocked(series: list[Sample], ends: Mapping[tuple[str | None, int], float]) -> Sample | None:
    """The sample that shows this process blocked on a rank that ended with sends never waited,
    and still blocked past that rank's end; None when it was not.

    Its last sample before its final line (or its last, without one) must be blocked on that
    rank, and it must have stayed so past that rank's end: a sample taken after it, still
    blocked, or a final line after it that is no normal end (the blocked receive failed when the
    sender's exit closed the connection). A process that ended normally was not stuck, however
    often its samples caught it in `recv`: a receive loop spends most of its time there."""
    final = series[-1] if series[-1].kind == "final" else None
    running = [s for s in series if s.kind != "final"]
    last = running[-1] if running else None
    if last is None or not last.blocked_on or last.blocked_peer is None:
        return None
    ended_at = ends.get((series[-1].world, last.blocked_peer))
    if ended_at is None:
        return None
    if final is not None and final.state == "done" and not _stopped_by_hicache(final):
        return None  # it ended normally: whatever it waited for came
    if last.wall >= ended_at:
        return last  # seen blocked after the peer had ended
    if final is not None and final.wall >= ended_at and final.state == "error":
        return last  # blocked until the peer's end closed the connection under it
    return None


def _stopped_by_hicache(final: Sample) -> bool:
    return final.message == STOPPED_AT_END or (final.message or "").startswith(DETACHED_PREFIX)
