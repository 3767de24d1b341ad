"""Shutdown hazards of a traced program, from its processes' last lines. Pure.

A process that ended by itself (not stopped by hicache) holding send Works it never waited,
or having dropped them unwaited, may have left its peers waiting for messages that were
never delivered: on gloo a send whose Work is dropped unwaited may never be delivered, and its
receiver then waits forever in `recv` (a race: whether the message happened to arrive does not
matter). Its final line's sites say which sends; a peer's last
samples say whether it is indeed blocked on it ("recv from rank 0 at x.py:17"): its last
line, or the one before a final line (the sender's exit closes the connection, and the
blocked receive then ends in an error).
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
