"""Why a traced program's memory grows: its live Works, a message backlog, or neither. Pure.

A LEAK of a traced process names its cause:
- **works**: live Works keep growing (stats.decide's work-list rules): the site that makes them;
- **dropped**: the program keeps dropping point-to-point Works unwaited, and its memory grows
  (RSS as rule 2 of stats.decide reads it, or a message backlog to a peer): on gloo each such
  Work dropped before its message moved is never delivered, wedges its connection, and leaves
  its state behind (analysis/dropped.py; measured by `hicache doctor`). Its rate, its top site
  and the bytes each dropped Work costs the process are named;
- **backlog**: messages to a peer keep piling up, sent faster than the peer receives them
  (analysis/messages.py): the pair, the backlog's rate and the sender's site. The Works may
  be few (a sender that keeps only the last 8), but every unreceived message holds state in
  the transport, and memory grows with the backlog;
- **memory**: neither grows, yet RSS (and anonymous memory, when read) still rises after the
  warm-up. That is no Work leak: the verdict is INCONCLUSIVE with a reason that says memory
  grows and that Works and messages do not explain it; `check` and the pytest plugin fail it
  only when a memory limit was asked for (`--max-rss-slope`, `max_rss_slope=`).
hicache's own ranks keep the verdict stats.decide gives; their flows are still reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from hicache_cli.analysis import stats
from hicache_cli.analysis.assess import Assessment, assess_rank
from hicache_cli.analysis.dropped import MAX_BYTES_PER_DROP, Dropping, dropping
from hicache_cli.analysis.kinds import CauseKind, Verdict
from hicache_cli.analysis.messages import PeerFlow, growing_backlogs, peer_flows
from hicache_cli.analysis.results import Site
from hicache_cli.analysis.shutdown import SEND_OPS
from hicache_cli.analysis.trace_report import read_sites, site_text
from hicache_cli.sample import Sample


@dataclass(frozen=True)
class Finding:
    """The cause of one rank's memory growth, and the sentence naming it."""

    cause: CauseKind
    text: str
    site: Site | None = None  # works: the top site; backlog: the sender's site; dropped: the top dropping site
    peer: int | None = None  # backlog: the receiver
    group: str | None = None
    per_s: float | None = None  # backlog: messages per second it grows by; dropped: Works dropped per second
    backlog: int | None = None  # ... and its size at the end
    also: str | None = None  # works, dropped: a backlog growing as well
    dropped: int | None = None  # dropped: Works dropped unwaited in all


@dataclass(frozen=True)
class Judged:
    """A rank's assessment, its messages per peer, and (a traced process) the cause."""

    assessment: Assessment
    flows: tuple[PeerFlow, ...] = ()
    finding: Finding | None = None

    @property
    def verdict(self) -> stats.Decision:
        return self.assessment.verdict


def judge(
    samples: Mapping[int, list[Sample]],
    slot: int,
    warmup_s: float | None,
    threshold_mb_per_h: float,
    max_points: int = stats.MAX_POINTS,
    tp: int = 1,
) -> Judged:
    """Rank file `slot`'s verdict among the run's `samples` (for the backlogs of its sends)."""
    series = samples.get(slot) or []
    assessment = assess_rank(series, warmup_s, threshold_mb_per_h, max_points)
    flows = tuple(peer_flows(samples, slot, assessment.warmup_s, tp))
    if not series or series[-1].works is None:
        return Judged(assessment, flows)
    finding = _finding(assessment, flows, series)
    if finding is None:
        return Judged(_with_drops_said(assessment, series), flows)
    return Judged(replace(assessment, verdict=_verdict(assessment, finding, series)), flows, finding)


def _with_drops_said(assessment: Assessment, series: list[Sample]) -> Assessment:
    """A verdict that is no leak, beside point-to-point Works the process keeps dropping: the
    drops are said after its reason (on gloo each one dropped before its message moved is lost;
    the memory they cost did not decide this run)."""
    sites = _last_sites(series)
    dropped = dropping(series, assessment.cut, sites)
    if dropped is None:
        return assessment
    at = f", most at {site_text(dropped.site)}" if dropped.site is not None else ""
    said = f"; Works dropped unwaited: {dropped.per_s:.0f}/s ({dropped.total} in all){at}"
    verdict = assessment.verdict
    return replace(assessment, verdict=replace(verdict, reason=verdict.reason + said))


def _finding(assessment: Assessment, flows: tuple[PeerFlow, ...], series: list[Sample]) -> Finding | None:
    verdict = assessment.verdict
    sites = _last_sites(series)
    growing = growing_backlogs(list(flows))
    if verdict.verdict is Verdict.LEAK and verdict.basis == "work-list":
        top = max(sites, key=lambda s: (s.live, s.live_max), default=None)
        text = f"live Works grow, made at {site_text(top)} and never waited" if top else "live Works grow"
        also = backlog_text(growing[0], _sender_site(sites, growing[0].peer)) if growing else None
        return Finding(CauseKind.WORKS, text, top, also=also)
    dropped = dropping(series, assessment.cut, sites)
    if dropped is not None and (growing or (verdict.verdict is Verdict.LEAK and _explains(assessment, dropped))):
        return _dropped_finding(dropped, growing, sites)
    if growing:
        flow = growing[0]
        sender = _sender_site(sites, flow.peer)
        return Finding(
            CauseKind.BACKLOG,
            backlog_text(flow, sender),
            sender,
            flow.peer,
            flow.group,
            flow.backlog_per_s,
            flow.backlog,
        )
    if verdict.verdict is Verdict.LEAK:  # RSS (and anonymous memory) alone
        return Finding(CauseKind.MEMORY, "memory grows, not from Works or messages")
    return None


def _explains(assessment: Assessment, dropped: Dropping) -> bool:
    """Whether the drops can account for the memory growth: no more bytes per dropped Work than
    a Work can leave behind (dropped.MAX_BYTES_PER_DROP)."""
    rss = assessment.rss
    return rss is None or dropped.per_s <= 0 or rss.slope / dropped.per_s <= MAX_BYTES_PER_DROP


def _dropped_finding(dropped: Dropping, growing: list[PeerFlow], sites: list[Site]) -> Finding:
    """The Works dropped are the cause; a backlog growing beside them (messages that will never
    arrive: the connection is wedged) is said with them."""
    site = dropped.site
    also = backlog_text(growing[0], _sender_site(sites, growing[0].peer)) if growing else None
    text = dropped.text(site_text(site) if site is not None else None)
    return Finding(CauseKind.DROPPED, text, site, per_s=dropped.per_s, also=also, dropped=dropped.total)


def _verdict(assessment: Assessment, finding: Finding, series: list[Sample]) -> stats.Decision:
    base, rss = assessment.verdict, assessment.rss
    rss_text = (
        f"RSS {stats.per_hour_mb(rss.slope):+.0f} MB/h "
        f"[95% {stats.per_hour_mb(rss.lo):+.0f}, {stats.per_hour_mb(rss.hi):+.0f}]"
        if rss
        else "RSS not read"
    )
    if finding.cause is CauseKind.WORKS:
        return base if finding.also is None else replace(base, reason=f"{base.reason}; {finding.also}")
    if finding.cause is CauseKind.BACKLOG:
        return stats.Decision(Verdict.LEAK, f"{finding.text}; {rss_text}", "backlog")
    if finding.cause is CauseKind.DROPPED:
        each = f", {rss.slope / finding.per_s:.0f} B a dropped Work" if rss and finding.per_s and rss.slope > 0 else ""
        also = f"; {finding.also}" if finding.also else ""
        # a growing backlog is as causal as a growing work list; RSS alone needs as long as boundedness
        basis = "backlog" if finding.also else "dropped"
        return stats.Decision(Verdict.LEAK, f"{finding.text}; {rss_text}{each}{also}", basis)
    anon = assessment.anon
    anon_text = f", anonymous memory {stats.per_hour_mb(anon.slope):+.0f} MB/h" if anon else ""
    most = max(s.depth for s in series[assessment.cut :]) if assessment.cut < len(series) else 0
    return stats.Decision(
        Verdict.INCONCLUSIVE,
        f"{finding.text}: {rss_text}{anon_text} after a warm-up of {assessment.warmup_s:.1f} s, "
        f"while live Works stay at most {most} and no message backlog grows",
        "memory",
    )


def backlog_text(flow: PeerFlow, sender: Site | None) -> str:
    """`messages to rank 1 pile up: backlog +26831/s (803428 sent, 9102 received by rank 1),
    sent from leaky.py:23 in main (isend to rank 1)`."""
    received = flow.sent - (flow.backlog or 0)
    text = (
        f"messages to rank {flow.peer} pile up: backlog {flow.backlog_per_s or 0.0:+.0f}/s "
        f"({flow.sent} sent, {received} received by rank {flow.peer}; {flow.backlog} behind at the end)"
    )
    return f"{text}, sent from {site_text(sender)}" if sender is not None else text


def _last_sites(series: list[Sample]) -> list[Site]:
    """The creation sites of the latest sample that carried them (about once a second)."""
    return read_sites(next((s.sites for s in reversed(series) if s.sites is not None), []))


def _sender_site(sites: list[Site], peer: int) -> Site | None:
    """The site that sent the most messages to `peer` (blocking sends have no site)."""
    sends = [s for s in sites if s.op in SEND_OPS and s.peer == peer]
    return max(sends, key=lambda s: s.created, default=None)
