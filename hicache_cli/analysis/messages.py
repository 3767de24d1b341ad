"""Point-to-point messages between ranks, per peer, and the backlog of each pair. Pure.

A rank's samples say how many messages it sent to and received from each peer, per process
group (`Sample.peers`: rows [peer, group, sent, sent_bytes, received, received_bytes], from
the tracer, blocking calls included), and which world the process is in (`Sample.world`: its
default group's rendezvous). A peer is the process of that rank in the same world: processes
of another world (workers that form their own group) have the same rank numbers.

The backlog from A to B is what A sent to B less what B received from A: messages posted by
the sender that the receiver has not asked for yet, queued in the transport (gloo keeps each
one's state on both sides). A backlog that keeps growing is memory that grows with it: a
sender outrunning its receiver.

hicache's own ranks do not carry rows; their PP-sync counts (`sent` downstream to rank + tp,
`received` from rank - tp) make the same rows, in a group called "pp", without bytes.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hicache_cli.analysis import stats
from hicache_cli.analysis.growth import Growth, growth
from hicache_cli.records import matcher
from hicache_cli.sample import Sample

PP_GROUP = "pp"  # hicache's own ranks: their PP-sync group


@dataclass(frozen=True)
class PeerRow:
    """One sample's counts with one peer in one group."""

    peer: int
    group: str
    sent: int
    sent_bytes: int | None  # None: not counted (hicache's own ranks)
    received: int
    received_bytes: int | None


@dataclass(frozen=True)
class PeerFlow:
    """A rank's messages with one peer in one group, at its last sample, and the backlog of
    what it sent there (None where the peer's own counts are unknown: no rank file)."""

    peer: int
    group: str
    sent: int
    sent_bytes: int | None
    received: int
    received_bytes: int | None
    backlog: int | None = None  # sent to the peer and not received by it, at the end
    backlog_trend: stats.Trend | None = None  # the backlog's trend after warm-up, messages per second
    backlog_growth: Growth | None = None  # ... and how it rose (analysis/growth.py)

    @property
    def backlog_per_s(self) -> float | None:
        return None if self.backlog_trend is None else self.backlog_trend.slope

    @property
    def backlog_grows(self) -> bool:
        """The backlog kept rising after warm-up, as a work list is judged (stats.decide): its
        trend's whole interval above DEPTH_GROWTH_FLOOR and a gain of DEPTH_MIN_GAIN over the
        window, or a rise that only ever goes up (growth.only_grows); and what it gained is
        still behind at the end (at least DEPTH_MIN_GAIN, and half the gain)."""
        trend, rise = self.backlog_trend, self.backlog_growth
        if rise is None or self.backlog is None:
            return False
        # what grew is still there at the end: a pipeline's backlog of a few sends never is
        if self.backlog < max(stats.DEPTH_MIN_GAIN, rise.gain / 2.0):
            return False
        if rise.only_grows:
            return True
        if trend is None:
            return False
        return trend.lo > stats.DEPTH_GROWTH_FLOOR and trend.slope * rise.span_s >= stats.DEPTH_MIN_GAIN


def peer_rows(sample: Sample, tp: int = 1) -> list[PeerRow]:
    """The sample's rows: the tracer's, or (hicache's own ranks) its PP-sync counts."""
    if sample.peers is not None:
        return [row for r in sample.peers if (row := _peer_row(r)) is not None]
    if sample.works is not None:  # a traced process from before rows were counted
        return []
    rows = []
    if sample.sent:
        rows.append(PeerRow(sample.rank + tp, PP_GROUP, sample.sent, None, 0, None))
    if sample.received:
        rows.append(PeerRow(sample.rank - tp, PP_GROUP, 0, None, sample.received, None))
    return rows


_ROW_TYPES = tuple(matcher(hint) for hint in typing.get_type_hints(PeerRow).values())


def _peer_row(raw: list[Any]) -> PeerRow | None:
    """A row as the tracer wrote it (tracer/messages.py); None for one a foreign program's
    tracer mangled (another length, a string where a count goes): that row is left out."""
    if len(raw) != len(_ROW_TYPES) or not all(test(v) for test, v in zip(_ROW_TYPES, raw, strict=True)):
        return None
    return PeerRow(*raw)


def _row(sample: Sample, peer: int, group: str, tp: int) -> PeerRow | None:
    return next((r for r in peer_rows(sample, tp) if r.peer == peer and r.group == group), None)


def peer_series(samples: Mapping[int, list[Sample]], slot: int, peer: int) -> list[Sample]:
    """The samples of `peer`'s process, as seen from the rank file `slot`: the file of the same
    world whose rank is `peer` and whose time overlaps slot's the most (a program may start
    process groups with the same ranks one after another). A rank number names a process only
    within its world: forkserver workers that form a group of their own have ranks 0 and 1 too
    (issue 38), and are never another world's peers."""
    mine = samples.get(slot) or []
    if not mine:
        return []
    start, end = mine[0].wall, mine[-1].wall
    world = mine[-1].world
    best, overlap = [], -1.0
    for other_slot, series in samples.items():
        if other_slot == slot or not series or series[-1].rank != peer or series[-1].world != world:
            continue
        shared = min(end, series[-1].wall) - max(start, series[0].wall)
        if shared > overlap:
            best, overlap = series, shared
    return best


def backlog_points(sender: list[Sample], receiver: list[Sample], group: str, tp: int = 1) -> list[tuple[float, float]]:
    """(sender's t, sent to the receiver - received by it from the sender) at each of the
    sender's samples. The receiver's count is interpolated at the sender's wall time (both
    run on one host, or on hosts whose clocks agree): taking its last sample before would
    count a tenth of a second of receives as backlog, a steady offset a pipeline's bursts
    can tilt into a trend."""
    if not sender or not receiver:
        return []
    a, b = sender[-1].rank, receiver[-1].rank
    counts = [(s.wall, row.received) for s in receiver if (row := _row(s, a, group, tp)) is not None]
    points, j = [], 0
    for s in sender:
        row = _row(s, b, group, tp)
        if row is None:
            continue
        while j < len(counts) and counts[j][0] <= s.wall:
            j += 1
        points.append((s.t, float(row.sent - _between(counts, j, s.wall))))
    return points


def _between(counts: list[tuple[float, int]], j: int, wall: float) -> float:
    """The count at `wall`, from the readings before (index j - 1) and after (j)."""
    if j == 0:
        return 0.0 if not counts or wall < counts[0][0] else float(counts[0][1])
    w0, c0 = counts[j - 1]
    if j == len(counts) or counts[j][0] <= w0:
        return float(c0)
    w1, c1 = counts[j]
    return c0 + (c1 - c0) * (wall - w0) / (w1 - w0)


def peer_flows(
    samples: Mapping[int, list[Sample]], slot: int, warmup_s: float = 0.0, tp: int = 1, trends: bool = True
) -> list[PeerFlow]:
    """Slot's messages with each peer at its last sample, each with the backlog of what it
    sent there (its value at the end, and, with `trends`, its trend and rise after `warmup_s`)."""
    series = samples.get(slot) or []
    if not series:
        return []
    flows = []
    for row in peer_rows(series[-1], tp):
        flow = PeerFlow(row.peer, row.group, row.sent, row.sent_bytes, row.received, row.received_bytes)
        other = peer_series(samples, slot, row.peer) if row.sent else []
        if other:
            theirs = _row(other[-1], series[-1].rank, row.group, tp)
            points = backlog_points(series, other, row.group, tp) if trends else []
            after = [p for p in points if p[0] >= warmup_s]
            flow = PeerFlow(
                row.peer,
                row.group,
                row.sent,
                row.sent_bytes,
                row.received,
                row.received_bytes,
                backlog=row.sent - (theirs.received if theirs is not None else 0),
                backlog_trend=stats.theil_sen(stats.thin(after)) if len(after) >= stats.MIN_POINTS else None,
                backlog_growth=growth(after),
            )
        flows.append(flow)
    return flows


def growing_backlogs(flows: list[PeerFlow]) -> list[PeerFlow]:
    """The flows whose backlog keeps rising, the fastest first."""
    return sorted((f for f in flows if f.backlog_grows), key=lambda f: -(f.backlog_per_s or 0.0))
