"""What `--metrics-port` exports, from the samples so far: one record per rank. Pure: the
Prometheus side (present/metrics_exporter.py) only names and serves these values.

The loop-latency histogram is the samples' own (cumulative since the workload started, 20
buckets a decade) summed into Prometheus buckets at every quarter decade, whose edges are
edges of the samples' buckets too: the counts are exact, not interpolated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hicache_cli.analysis.causes import judge
from hicache_cli.analysis.messages import PeerFlow, peer_flows
from hicache_cli.attached import place_text
from hicache_cli.config import RunConfig
from hicache_cli.histogram import BUCKETS_PER_DECADE
from hicache_cli.sample import Sample

# Prometheus bucket edges, seconds: 10 us to 10 s, four a decade (10^(m/4)).
EDGES_PER_DECADE = 4
EDGE_EXPONENTS = range(-5 * EDGES_PER_DECADE, 1 * EDGES_PER_DECADE + 1)
_STRIDE = BUCKETS_PER_DECADE // EDGES_PER_DECADE  # sample buckets per Prometheus bucket


RSS_TREND_S = 600.0  # the RSS trend exported: over the last ten minutes of samples


@dataclass(frozen=True)
class HolderMetrics:
    """One holder of Works in a followed process (`attach --follow`: the sample's `holders`)."""

    path: str
    container: str
    works: int
    per_hour: float | None  # Works gained per hour over the agent's recent censuses
    growing: bool  # a new high at each of the last censuses (attach/follow.py)
    site: str  # where most of its Works were made ("file:line in function"); "" until a window found it

    @classmethod
    def from_line(cls, line: dict[str, Any]) -> HolderMetrics:
        sites = line.get("sites") or []
        top = sites[0] if sites and isinstance(sites[0], list) and len(sites[0]) >= 3 else None
        per_hour = line.get("per_hour")
        return cls(
            path=str(line.get("path", "?")),
            container=str(line.get("container", "")),
            works=int(line.get("works") or 0),
            per_hour=float(per_hour) if isinstance(per_hour, int | float) else None,
            growing=bool(line.get("growing")),
            site=place_text(*top[:3]) if top else "",
        )


@dataclass(frozen=True)
class RankMetrics:
    rank: int  # the rank file's number (a traced process's slot)
    pp_rank: int
    tp_rank: int
    node: int
    rss_bytes: int | None  # None: not read in the last sample
    depth: int  # the work list's Works (under trace: live Works, never waited)
    rounds: int  # scheduler rounds completed (a traced program's --loop calls)
    latency_buckets: tuple[tuple[float, int], ...]  # (upper edge s, rounds at or under it), cumulative
    latency_count: int  # rounds the histogram holds
    state: str  # the last sample's
    peers: tuple[PeerFlow, ...] = ()  # messages per peer and group, with the backlog of this rank's sends
    holders: tuple[HolderMetrics, ...] = ()  # attach --follow: the last census's holders
    sites: tuple[SiteMetrics, ...] = ()  # trace, attach: Works by creation site
    rss_per_hour: float | None = None  # RSS bytes gained per hour over the last RSS_TREND_S of samples

    def labels(self) -> dict[str, str]:
        return {
            "rank": str(self.rank),
            "pp_rank": str(self.pp_rank),
            "tp_rank": str(self.tp_rank),
            "node": str(self.node),
        }


def latency_buckets(hist: dict[str, int]) -> tuple[tuple[tuple[float, int], ...], int]:
    """A sample's cumulative histogram ({bucket: rounds}) as Prometheus buckets: (le, count)
    at every quarter decade, cumulative; and the total."""
    counts = sorted((int(bucket), int(n)) for bucket, n in hist.items())
    total = sum(n for _, n in counts)
    out, seen, i = [], 0, 0
    for m in EDGE_EXPONENTS:
        upper = m * _STRIDE  # sample bucket b ends at 10^((b+1)/20): those with b + 1 <= upper
        while i < len(counts) and counts[i][0] + 1 <= upper:
            seen += counts[i][1]
            i += 1
        out.append((10 ** (m / EDGES_PER_DECADE), seen))
    return tuple(out), total


def rank_metrics(samples: dict[int, list[Sample]], tp: int = 1) -> list[RankMetrics]:
    """Every rank that has sampled, from its latest sample, in rank order."""
    out = []
    for rank, series in sorted(samples.items()):
        if not series:
            continue
        last = series[-1]
        buckets, total = latency_buckets(last.lat_hist)
        out.append(
            RankMetrics(
                rank=rank,
                pp_rank=last.pp_rank,
                tp_rank=last.tp_rank,
                node=last.node,
                rss_bytes=last.rss_bytes,
                depth=last.depth,
                rounds=last.rounds,
                latency_buckets=buckets,
                latency_count=total,
                state=last.state,
                peers=tuple(peer_flows(samples, rank, tp=tp, trends=False)),
                holders=tuple(HolderMetrics.from_line(h) for h in last.holders or () if isinstance(h, dict)),
                sites=last_sites(series),
                rss_per_hour=rss_trend(series),
            )
        )
    return out


@dataclass(frozen=True)
class SiteMetrics:
    """A creation site's Works as the rank's last `sites` said (under trace and attach the
    whole run's; under attach --follow the last tracer window's)."""

    site: str  # file:line in function
    op: str
    created: int
    waited: int
    dropped: int
    live: int


SITES_LOOKBACK = 120  # samples searched back for the last one carrying sites (written once a second)
VERDICT_POINTS = 60  # as the dashboard's live trend: thin, recomputed often


def last_sites(series: list[Sample]) -> tuple[SiteMetrics, ...]:
    """The sites of the last sample that carried them (none within SITES_LOOKBACK: none)."""
    carried = next((x.sites for x in reversed(series[-SITES_LOOKBACK:]) if x.sites is not None), None) or []
    out = []
    for site in carried:
        if not isinstance(site, dict):
            continue
        count = {
            k: int(site.get(k) or 0) if isinstance(site.get(k), int) else 0
            for k in ("created", "waited", "dropped", "live")
        }
        where = place_text(site.get("file", "?"), site.get("line", "?"), site.get("function", "?"))
        out.append(SiteMetrics(where, str(site.get("op") or ""), **count))
    return tuple(out)


def live_verdicts(samples: dict[int, list[Sample]], config: RunConfig) -> dict[int, str]:
    """Each rank's verdict so far, as the dashboard's (thin trends: cheap enough every few seconds)."""
    tp = config.ranked.tp if config.ranked else 1
    out = {}
    for rank, series in samples.items():
        if series:
            judged = judge(samples, rank, config.warmup_s, config.leak_threshold_mb_per_h, VERDICT_POINTS, tp)
            if judged.assessment.cut < len(series):
                out[rank] = str(judged.assessment.verdict.verdict)
    return out


def rss_trend(series: list[Sample], over_s: float = RSS_TREND_S) -> float | None:
    """RSS bytes gained per hour from the first sample within `over_s` of the last to the last
    (None with less than a minute of RSS readings)."""
    last = next((x for x in reversed(series) if x.rss_bytes is not None), None)
    if last is None:
        return None
    first = next((x for x in series if x.rss_bytes is not None and x.t >= last.t - over_s), None)
    if first is None or last.t - first.t < 60.0:
        return None
    return (last.rss_bytes - first.rss_bytes) * 3600.0 / (last.t - first.t)  # type: ignore[operator]
