"""Whether a traced process stopped making progress before its end. Pure.

A traced process progresses while torch.distributed calls pass through it: Works handed out by
its process groups (`works.ops`: every call, a blocking collective's or `recv`'s too), Works
waited or dropped, point-to-point messages sent or received, rounds of `--loop`. One whose
counts all stood still for longer than the bound (the trace's `--stall-timeout`) up to its last
sample, and that did not end by itself (hicache stopped it, or it left no final line; a
process `hicache attach` detached from runs on and is not judged so), was stuck there: in a
collective its peers never joined, in a `recv` whose message was lost, or outside
torch.distributed altogether (a data loader that died). Its memory then says nothing about a
leak under load, however flat it is: its verdict is reached on its samples up to when it
stopped (`until_stuck`), the report says so beside the verdict, and `check` cannot pass it.

A process whose samples stopped coming (its probe thread never ran again: the interpreter
itself hung) while the run's other processes went on sampling is stuck the same way, from its
last sample to the run's last.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hicache_cli.protocol import STOPPED_AT_END
from hicache_cli.sample import Sample


@dataclass(frozen=True)
class Stuck:
    """A traced process that made no progress for its last `for_s` seconds."""

    since_s: float  # the process's clock (Sample.t) when it last made progress
    for_s: float  # ... and how long it then stood still, to its last sample (or the run's)
    blocked_in: str | None  # what it was blocked in at the end, when the tracer knows
    unresponsive: bool = False  # its samples stopped: for_s runs to the run's last sample

    def text(self) -> str:
        """`no progress for the last 41 s (from t=3.2 s: no Work made, waited or dropped, no
        message, no round): blocked in recv from rank 1 at ping_ack.py:31`."""
        if self.unresponsive:
            return f"no sample for the last {self.for_s:.0f} s of the run (from t={self.since_s:.1f} s): unresponsive"
        what = "no Work made, waited or dropped, no message, no round"
        head = f"no progress for the last {self.for_s:.0f} s (from t={self.since_s:.1f} s: {what})"
        return f"{head}: blocked in {self.blocked_in}" if self.blocked_in else head


def progress(sample: Sample) -> tuple[int, ...]:
    """What advances while the process makes progress."""
    works = sample.works or {}
    made = works.get("ops", works.get("created", 0))
    return (made, works.get("waited", 0), works.get("dropped", 0), sample.sent, sample.received, sample.rounds)


def stuck(series: list[Sample], bound_s: float, run_end_wall: float | None = None) -> Stuck | None:
    """How `series`, a traced process's samples, ended stuck for longer than `bound_s`; None when
    it did not (or ended by itself: whatever it waited for came, or it gave up). `run_end_wall`:
    the last wall time any process of the run sampled."""
    if not series or series[-1].works is None or _ended_by_itself(series[-1]):
        return None
    last = series[-1]
    if last.kind != "final" and run_end_wall is not None and run_end_wall - last.wall > bound_s:
        return Stuck(last.t, run_end_wall - last.wall, None, unresponsive=True)
    end = progress(last)
    first = len(series) - 1
    while first > 0 and progress(series[first - 1]) == end:
        first -= 1
    since = series[first].t
    if last.t - since <= bound_s:
        return None
    running = next((s for s in reversed(series) if s.kind != "final"), last)
    return Stuck(since, last.t - since, running.blocked_on)


def until_stuck(series: list[Sample], found: Stuck) -> list[Sample]:
    """The samples of `series` up to when it stopped making progress (its verdict's data)."""
    return [s for s in series if s.t <= found.since_s]


def stuck_processes(samples: Mapping[int, list[Sample]], bound_s: float) -> dict[int, Stuck]:
    """Per rank file: how it ended stuck, for those that did."""
    walls = [s[-1].wall for s in samples.values() if s]
    end = max(walls) if walls else None
    return {slot: found for slot, series in samples.items() if (found := stuck(series, bound_s, end)) is not None}


def _ended_by_itself(last: Sample) -> bool:
    """A final line of the program's own (it exited, raised, or called os._exit), or hicache
    attach's detach (the process runs on as it was: an idle server is not stuck), rather than
    hicache's stop at the end of a trace."""
    return last.kind == "final" and last.message != STOPPED_AT_END
