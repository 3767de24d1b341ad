"""Works a traced program keeps dropping unwaited, and whether they are point-to-point. Pure.

What a dropped Work costs on gloo was measured (`hicache doctor`, docs/verdicts.md#what-a-gloo-work-costs):
a send or receive Work dropped before its message moved is never delivered, nothing after it
on that connection is either, and ~170 B of its state stays for as long as the process group
lives; an async collective dropped unwaited is held by the group's worker threads until it
has run, then costs nothing. So a program that keeps dropping point-to-point Works while its
memory grows has found its cause; one that drops collectives has not.

A Work counts as dropped unwaited when the program let it go without `wait()` and without
having seen it complete (`is_completed()` true: on NCCL a polling reaper's Works are done
when it drops them). The counts come from the tracer (`Sample.works`, every sample; the
sites, about once a second): dropped - (completed - waited) is what was dropped unseen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hicache_cli.analysis.growth import Growth, growth
from hicache_cli.analysis.results import Site
from hicache_cli.analysis.shutdown import SEND_OPS
from hicache_cli.sample import Sample

RECV_OPS = frozenset({"recv", "irecv", "recv_anysource", "batch_isend_irecv(irecv)"})
POINT_TO_POINT = SEND_OPS | RECV_OPS
MIN_SHARE = 0.5  # point-to-point Works are at least this share of those dropped
# A dropped Work leaves ~170 B on gloo, and never more than a kept one holds (~1.1 KB, hicache
# doctor): memory that grows by more than this per dropped Work is not theirs to explain
MAX_BYTES_PER_DROP = 2048.0


def unseen(counts: Mapping[str, Any]) -> int:
    """Works dropped without wait() and never seen complete, from created/waited/completed/dropped."""
    dropped, waited, completed = (int(counts.get(k, 0) or 0) for k in ("dropped", "waited", "completed"))
    return max(0, dropped - max(0, completed - waited))


@dataclass(frozen=True)
class Dropping:
    """A traced process that keeps dropping point-to-point Works unwaited."""

    rise: Growth  # Works dropped unwaited, after warm-up: a cumulative count
    total: int  # ... in all, at the end
    site: Site | None  # the point-to-point site that dropped the most
    share: float  # the point-to-point share of the Works dropped at the sites

    @property
    def per_s(self) -> float:
        return self.rise.rate

    def text(self, where: str | None) -> str:
        """`Works dropped unwaited grow by 3212/s (48180 in all), most at x.py:44 in f (isend to
        rank 1): ...`; `where`: the site's text."""
        at = f", most at {where}" if where else ""
        return (
            f"Works dropped unwaited grow by {self.per_s:.0f}/s ({self.total} in all){at}: on gloo a "
            f"point-to-point Work dropped before its message moved is never delivered, nor is anything after "
            f"it on that connection, and its state stays (hicache doctor measures it)"
        )


def dropping(series: list[Sample], cut: int, sites: list[Site]) -> Dropping | None:
    """How `series` (a traced process's samples) kept dropping Works unwaited after the warm-up
    (index `cut`), when it did and the Works are mostly point-to-point; `sites` are its last.

    A cumulative count never falls, so growth.only_grows reads as: at least ORDERS x 2 Works
    dropped after warm-up, and the second half of the window still dropping a fifth of them."""
    points = [(s.t, float(unseen(s.works))) for s in series[cut:] if s.works is not None]
    rise = growth(points)
    if rise is None or not rise.only_grows:
        return None
    counted = [(site, unseen(_counts(site))) for site in sites]
    everywhere = sum(n for _, n in counted)
    p2p = [(site, n) for site, n in counted if site.op in POINT_TO_POINT and n > 0]
    share = sum(n for _, n in p2p) / everywhere if everywhere else 0.0
    if share < MIN_SHARE:
        return None
    top = max(p2p, key=lambda pair: pair[1])[0] if p2p else None
    last = next((s.works for s in reversed(series) if s.works is not None), {})
    return Dropping(rise, unseen(last), top, share)


def _counts(site: Site) -> dict[str, int]:
    return {"dropped": site.dropped, "waited": site.waited, "completed": site.completed}
