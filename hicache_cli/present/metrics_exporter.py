"""`--metrics-port`: every rank's figures in Prometheus' text exposition, served over HTTP
while the command runs (`/metrics`), with prometheus_client. That library is the optional
`metrics` extra: it is imported here only, and only when a command is given the option.

The exporter is a view like the dashboard: the launcher (or `watch`'s follower) hands it
the samples so far; a scrape reads the latest snapshot (analysis/metrics.py), never the
run directory.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from hicache_cli.analysis.metrics import RankMetrics, live_verdicts, rank_metrics
from hicache_cli.config import RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.sample import Sample

LABELS = ("rank", "pp_rank", "tp_rank", "node")
INSTALL_HINT = "pip install 'hicache[metrics]'"
VERDICT_EVERY_S = 5.0
View = Callable[[dict[int, list[Sample]], float], None]


def check_metrics_options(port: int | None, host: str | None) -> None:
    """Cheap checks, before a run directory exists."""
    if port is None:
        if host is not None:
            raise UsageError("--metrics-host applies to --metrics-port: give the port to serve on")
        return
    if not 0 <= port <= 65535:
        raise UsageError(f"--metrics-port: {port} is not a valid TCP port (0-65535; 0 picks a free one)")


def beyond_loopback(address: str) -> bool:
    """Whether a server bound to `address` can be reached from other machines: anything but
    a loopback address, or a name that resolves only to loopback ones."""
    try:
        return not ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        pass
    try:
        found = {info[4][0] for info in socket.getaddrinfo(address, None)}
    except OSError:
        return True  # cannot tell: say so rather than stay silent
    return not all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in found)


class MetricsExporter:
    """Serves the latest samples' figures on http://HOST:PORT/metrics until close()."""

    def __init__(self, config: RunConfig, run_dir: str) -> None:
        self.config = config
        self.run_dir = run_dir
        self._lock = threading.Lock()
        self._ranks: list[RankMetrics] = []
        self._verdicts: dict[int, str] = {}
        self._verdicts_at = 0.0
        self._server: Any = None
        self.url = ""

    @classmethod
    def start(cls, host: str | None, port: int, config: RunConfig, run_dir: str) -> MetricsExporter:
        """Bind and serve; a missing library or a port that cannot be had is a UsageError."""
        try:
            import prometheus_client
        except ImportError:
            raise UsageError(f"--metrics-port needs the prometheus-client package: {INSTALL_HINT}") from None
        exporter = cls(config, run_dir)
        registry = prometheus_client.CollectorRegistry(auto_describe=False)
        registry.register(exporter)
        address = host or "127.0.0.1"
        try:
            served = prometheus_client.start_http_server(port, addr=address, registry=registry)
        except OSError as exc:
            raise UsageError(f"--metrics-port {port} on {address}: {exc.strerror or exc}") from None
        exporter._server = served[0] if isinstance(served, tuple) else None  # older clients return nothing
        bound = exporter._server.server_port if exporter._server is not None else port
        exporter.url = f"http://{address if ':' not in address else f'[{address}]'}:{bound}/metrics"
        return exporter

    def update(self, samples: dict[int, list[Sample]]) -> None:
        snapshot = rank_metrics(samples, self.config.ranked.tp if self.config.ranked else 1)
        now = time.monotonic()
        verdicts = self._verdicts
        if now >= self._verdicts_at:  # the verdict so far, every few seconds (a trend over every sample)
            verdicts, self._verdicts_at = live_verdicts(samples, self.config), now + VERDICT_EVERY_S
        with self._lock:
            self._ranks, self._verdicts = snapshot, verdicts

    def feeding(self, view: View) -> View:
        """`view`, and this exporter fed the same samples first."""

        def both(samples: dict[int, list[Sample]], elapsed: float) -> None:
            self.update(samples)
            view(samples, elapsed)

        return both

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def collect(self) -> Iterator[Any]:
        """prometheus_client's Collector protocol: the metric families, at scrape time."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        with self._lock:
            ranks, verdicts = list(self._ranks), dict(self._verdicts)
        cfg = self.config
        info = GaugeMetricFamily(
            "hicache_run_info", "The run being measured (value 1).", labels=["policy", "pp", "tp", "target", "run_dir"]
        )
        ranked = cfg.ranked
        shape = (str(ranked.pp), str(ranked.tp)) if ranked else ("", "")  # a traced program's: not known
        info.add_metric([cfg.label, *shape, cfg.target.kind, self.run_dir], 1)
        yield info
        rss = GaugeMetricFamily("hicache_rss_bytes", "Resident set size of the rank's process.", labels=LABELS)
        depth = GaugeMetricFamily(
            "hicache_work_list_depth",
            "Outstanding isend Works in the rank's work list (under hicache trace: live Works never waited).",
            labels=LABELS,
        )
        rounds = CounterMetricFamily("hicache_rounds", "Scheduler rounds the rank has completed.", labels=LABELS)
        latency = HistogramMetricFamily(
            "hicache_loop_latency_seconds",
            "Scheduler round latency since the workload started (buckets only: the ranks keep no exact sum).",
            labels=LABELS,
        )
        by_peer = [*LABELS, "peer", "group"]
        sent = CounterMetricFamily("hicache_messages_sent", "Point-to-point messages sent to the peer.", labels=by_peer)
        received = CounterMetricFamily(
            "hicache_messages_received", "Point-to-point messages received from the peer.", labels=by_peer
        )
        backlog = GaugeMetricFamily(
            "hicache_message_backlog",
            "Messages the rank sent to the peer that the peer has not received yet.",
            labels=by_peer,
        )
        for r in ranks:
            labels = list(r.labels().values())
            if r.rss_bytes is not None:
                rss.add_metric(labels, r.rss_bytes)
            depth.add_metric(labels, r.depth)
            rounds.add_metric(labels, r.rounds)
            buckets = [(_le(edge), count) for edge, count in r.latency_buckets] + [("+Inf", r.latency_count)]
            latency.add_metric(labels, buckets, sum_value=None)
            for flow in r.peers:
                pair = [*labels, str(flow.peer), flow.group]
                sent.add_metric(pair, flow.sent)
                received.add_metric(pair, flow.received)
                if flow.backlog is not None:
                    backlog.add_metric(pair, flow.backlog)
        yield from (rss, depth, rounds, latency, sent, received, backlog)
        yield from _followed(ranks)
        yield from _judged(ranks, verdicts)


def _followed(ranks: list[RankMetrics]) -> Iterator[Any]:
    """`attach --follow`: per rank and holder, the Works held, their trend, whether the holder
    grows and the line that made them (the alerting rule in deploy/prometheus reads these);
    per rank the RSS trend."""
    from prometheus_client.core import GaugeMetricFamily

    by_holder = [*LABELS, "holder", "container", "site"]
    works = GaugeMetricFamily(
        "hicache_holder_works", "Works a holder of a followed process keeps (its last census).", labels=by_holder
    )
    per_hour = GaugeMetricFamily(
        "hicache_holder_growth_per_hour", "Works the holder gained per hour over its recent censuses.", labels=by_holder
    )
    growing = GaugeMetricFamily(
        "hicache_holder_growing",
        "1 while the holder's Works set a new high at each of its last censuses (a leak), else 0.",
        labels=by_holder,
    )
    rss_trend = GaugeMetricFamily(
        "hicache_rss_growth_bytes_per_hour", "RSS gained per hour over the last ten minutes of samples.", labels=LABELS
    )
    for r in ranks:
        labels = list(r.labels().values())
        if r.rss_per_hour is not None:
            rss_trend.add_metric(labels, r.rss_per_hour)
        for h in r.holders:
            named = [*labels, h.path, h.container, h.site]
            works.add_metric(named, h.works)
            growing.add_metric(named, 1.0 if h.growing else 0.0)
            if h.per_hour is not None:
                per_hour.add_metric(named, h.per_hour)
    yield from (works, per_hour, growing, rss_trend)


def _judged(ranks: list[RankMetrics], verdicts: dict[int, str]) -> Iterator[Any]:
    """Each rank's verdict so far (as the dashboard's) and its Works by creation site."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    verdict = GaugeMetricFamily(
        "hicache_verdict", "The rank's verdict so far (value 1, the verdict a label).", labels=[*LABELS, "verdict"]
    )
    by_site = [*LABELS, "site", "op"]
    families = {
        state: CounterMetricFamily(
            f"hicache_site_works_{state}", f"Works {state} at the creation site.", labels=by_site
        )
        for state in ("created", "waited", "dropped")
    }
    live = GaugeMetricFamily(
        "hicache_site_live_works", "Works made at the site, neither waited nor dropped.", labels=by_site
    )
    for r in ranks:
        labels = list(r.labels().values())
        if r.rank in verdicts:
            verdict.add_metric([*labels, verdicts[r.rank]], 1.0)
        for site in r.sites:
            named = [*labels, site.site, site.op]
            for state, family in families.items():
                family.add_metric(named, getattr(site, state))
            live.add_metric(named, site.live)
    yield from (verdict, *families.values(), live)


def _le(seconds: float) -> str:
    """A bucket edge as Prometheus writes one: short, and the same on every scrape."""
    return format(seconds, ".6g")
