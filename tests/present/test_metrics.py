"""`--metrics-port`: the figures (analysis/metrics.py) on synthetic samples with known
answers, the exporter scraped over real HTTP, and the options through main()."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hicache_cli.analysis.metrics import latency_buckets, rank_metrics
from hicache_cli.cli.main import main
from hicache_cli.config import StressConfig
from hicache_cli.histogram import LatencyHistogram
from hicache_cli.present.metrics_exporter import MetricsExporter
from hicache_cli.sample import Sample
from tests.conftest import FakeExecute, assert_refused, free_port

CONFIG = StressConfig(pp=2, policy="reap", duration_s=60.0)
HOLDER = {"path": "Relay.inflight[<int>]", "container": "dict", "works": 900, "completed": 0, "named": True,
          "per_hour": 1e5, "growing": True, "sites": [["relay.py", 29, "forward", 40]]}  # fmt: skip


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """metric sample name -> {sorted labels: value}, as a Prometheus server would read them."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def labels(rank: int, **extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"rank": str(rank), "pp_rank": str(rank), "tp_rank": "0", "node": "0", **extra}.items()))


# -- the figures ------------------------------------------------------------------------


def test_latency_buckets_are_exact_at_quarter_decades() -> None:
    hist = LatencyHistogram()
    hist.add_all([0.0005] * 3 + [0.002] * 5 + [0.5])  # 0.5 ms, 2 ms, 500 ms
    buckets, total = latency_buckets(hist.to_json())

    def at(edge: float) -> int:
        return next(count for le, count in buckets if math.isclose(le, edge))

    assert total == 9
    assert at(10**-3.5) == 0  # 0.316 ms: nothing yet
    assert at(10**-3.25) == 3  # 0.562 ms: the three 0.5 ms rounds
    assert at(10**-2.5) == 8  # 3.16 ms: and the five 2 ms ones
    assert at(10**-0.5) == 8  # 316 ms: not the 500 ms one
    assert at(1.0) == 9
    counts = [count for _, count in buckets]
    assert counts == sorted(counts)  # cumulative
    assert buckets[0][0] == pytest.approx(1e-5) and buckets[-1][0] == pytest.approx(10.0)


def test_rank_metrics_take_each_ranks_latest_sample(make_pp2_run: Callable[..., dict[int, list[Sample]]]) -> None:
    run = make_pp2_run(n=100)
    figures = rank_metrics(run)
    assert [f.rank for f in figures] == [0, 1]
    leak = figures[0]
    assert (leak.depth, leak.rounds, leak.rss_bytes) == (run[0][-1].depth, 10_000, run[0][-1].rss_bytes)
    assert leak.latency_count == 10_000
    assert leak.labels() == {"rank": "0", "pp_rank": "0", "tp_rank": "0", "node": "0"}
    assert rank_metrics({0: [], 1: run[1]})[0].rank == 1  # a rank not sampled yet is left out


# -- the exporter, scraped --------------------------------------------------------------


def test_a_scrape_has_every_ranks_figures(make_pp2_run: Callable[..., dict[int, list[Sample]]]) -> None:
    run = make_pp2_run(n=100)
    exporter = MetricsExporter.start(None, 0, CONFIG, "runs/x")
    try:
        assert exporter.url.startswith("http://127.0.0.1:") and exporter.url.endswith("/metrics")
        assert scrape(exporter.url)["hicache_run_info"] == {
            (("policy", "reap"), ("pp", "2"), ("run_dir", "runs/x"), ("target", "model"), ("tp", "1")): 1.0
        }
        exporter.update(run)
        found = scrape(exporter.url)
    finally:
        exporter.close()
    assert found["hicache_rss_bytes"] == {labels(0): run[0][-1].rss_bytes, labels(1): run[1][-1].rss_bytes}
    assert found["hicache_work_list_depth"] == {labels(0): 10_000, labels(1): 0}
    assert found["hicache_rounds_total"] == {labels(0): 10_000, labels(1): 10_000}
    buckets = found["hicache_loop_latency_seconds_bucket"]
    assert buckets[labels(0, le="+Inf")] == 10_000
    assert buckets[labels(0, le="0.000562341")] == 0 and buckets[labels(0, le="0.00177828")] == 10_000  # 1 ms rounds
    # messages per peer: rank 0's PP-sync sends to rank 1, and what rank 1 had not received
    pair = labels(0, peer="1", group="pp")
    assert found["hicache_messages_sent_total"][pair] == run[0][-1].sent > 0
    assert found["hicache_message_backlog"][pair] == run[0][-1].sent - run[1][-1].received
    assert found["hicache_messages_received_total"][labels(1, peer="0", group="pp")] == run[1][-1].received


def test_close_frees_the_port() -> None:
    exporter = MetricsExporter.start("127.0.0.1", 0, CONFIG, "runs/x")
    port = int(exporter.url.rsplit(":", 1)[1].split("/")[0])
    exporter.close()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free again


# -- through the commands -----------------------------------------------------------------


@pytest.fixture(autouse=True)
def in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)


class ScrapingExecute(FakeExecute):
    """FakeExecute that scrapes `url` each time it hands the view samples, as Prometheus
    would during the run."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.scrapes: list[dict[str, Any]] = []

    def __call__(self, config: StressConfig, run_dir: Path, on_tick: Callable[..., None], *args: Any, **kw: Any) -> Any:
        def tick(samples: dict[int, list[Sample]], elapsed: float) -> None:
            on_tick(samples, elapsed)
            self.scrapes.append(scrape(self.url))

        return super().__call__(config, run_dir, tick, *args, **kw)


def test_stress_serves_metrics_during_the_run_and_stops_after(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hicache_cli.cli import running as common

    port = free_port()
    fake = ScrapingExecute(f"http://127.0.0.1:{port}/metrics")
    monkeypatch.setattr(common, "execute", fake)
    argv = ["stress", "--duration", "10s", "--run-dir", str(tmp_path / "run"), "--metrics-port", str(port)]
    assert main(argv) == 0
    assert f"metrics: http://127.0.0.1:{port}/metrics" in capsys.readouterr().out
    (found,) = fake.scrapes
    assert found["hicache_work_list_depth"][labels(0)] == 10_000  # reap: 1000 Works/s for the 10 s
    assert ("run_dir", str(tmp_path / "run")) in next(iter(found["hicache_run_info"]))
    with pytest.raises(ConnectionRefusedError):  # closed when the command ended
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


@pytest.mark.parametrize(
    ("options", "start"),
    [
        (["--metrics-host", "0.0.0.0"], "--metrics-host applies to --metrics-port"),
        (["--metrics-port", "70000"], "--metrics-port: 70000 is not a valid TCP port"),
    ],
)
@pytest.mark.parametrize("command", ["stress", "watch", "trace"])
def test_bad_metrics_options(
    command: str,
    options: list[str],
    start: str,
    fake_execute: FakeExecute,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_dir = tmp_path / "old"  # watch needs a run directory; made outside what must stay empty
    run_dir.mkdir()
    (run_dir / "config.json").write_text(CONFIG.to_dict().__repr__().replace("'", '"').replace("None", "null"))
    work = tmp_path / "work"
    work.mkdir()
    argv = {"stress": ["stress"], "watch": ["watch", str(run_dir)], "trace": ["trace"]}[command]
    program = ["--", "true"] if command == "trace" else []
    assert_refused([*argv, *options, *program], start, capsys, fake_execute, work)


def test_a_busy_metrics_port_is_one_line_before_any_run(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert_refused(
            ["stress", "--metrics-port", str(port)],
            f"--metrics-port {port} on 127.0.0.1: ",
            capsys,
            fake_execute,
            tmp_path,
        )


def test_without_the_extra_it_says_how_to_get_it(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed: import fails
    start = "--metrics-port needs the prometheus-client package: pip install 'hicache[metrics]'"
    assert_refused(["stress", "--metrics-port", "0"], start, capsys, fake_execute, tmp_path)


def test_prometheus_client_is_imported_only_when_asked_for() -> None:
    code = "import sys, hicache_cli.cli.main; assert 'prometheus_client' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_grafana_dashboard_reads_only_what_is_served(make_pp2_run: Callable[..., dict[int, list[Sample]]]) -> None:
    dashboard = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    exprs.append(dashboard["templating"]["list"][0]["query"])
    used = {name for expr in exprs for name in re.findall(r"\bhicache_[a-z_]+", expr)}
    exporter = MetricsExporter.start(None, 0, CONFIG, "runs/x")
    try:
        samples = make_pp2_run(n=20)  # rank 0 followed too (attach --follow): its holders' panels
        samples[0] = [dataclasses.replace(s, holders=[HOLDER]) for s in samples[0]]
        exporter.update(samples)
        served = set(scrape(exporter.url))
    finally:
        exporter.close()
    assert used <= served
    assert {"hicache_rss_bytes", "hicache_work_list_depth", "hicache_rounds_total"} <= used
    assert "hicache_loop_latency_seconds_bucket" in used


@pytest.mark.parametrize(
    ("host", "beyond"),
    [("127.0.0.1", False), ("::1", False), ("localhost", False), ("0.0.0.0", True), ("::", True), ("10.1.2.3", True)],
)
def test_which_addresses_serve_beyond_this_machine(host: str, beyond: bool) -> None:
    from hicache_cli.present.metrics_exporter import beyond_loopback

    assert beyond_loopback(host) is beyond


@pytest.mark.parametrize(("host", "warned"), [("0.0.0.0", True), ("127.0.0.1", False), (None, False)])
def test_serving_metrics_beyond_loopback_says_so(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str], host: str | None, warned: bool
) -> None:
    """Was: `--metrics-host 0.0.0.0` exposed every rank's metrics to the network without a word."""
    argv = ["stress", "--duration", "10s", "--run-dir", str(tmp_path / "run"), "--metrics-port", "0"]
    assert main([*argv, *(["--metrics-host", host] if host else [])]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    if warned:
        (line,) = warnings
        assert line.startswith("hicache: warning: --metrics-host 0.0.0.0 serves every rank's metrics")
        assert line.endswith("to anyone who can reach it, without authentication")
    else:
        assert warnings == []


def test_the_rss_trend_is_over_the_last_ten_minutes_and_needs_a_minute() -> None:
    from hicache_cli.analysis.metrics import rss_trend

    def at(t: float, rss: int | None) -> Sample:
        return Sample(t=t, wall=t, rank=0, pp_rank=0, tp_rank=0, pid=1, state="running", rss_bytes=rss, depth=0,
                      held_bytes=0, rounds=0, lat_p50_ms=None, lat_p99_ms=None, lat_max_ms=None, lat_count=0,
                      round_age_s=0.0, sent=0, received=0)  # fmt: skip

    assert rss_trend([at(t, 1000) for t in range(0, 50, 10)]) is None  # 40 s of readings
    early = [at(t, 10**9) for t in range(0, 600, 10)]  # flat for ten minutes, then +1 MB a minute
    late = [at(600 + t, 10**9 + t * 1_000_000 // 60) for t in range(0, 601, 10)]
    assert rss_trend(early + late) == pytest.approx(60e6)
    assert rss_trend([*late[:-1], at(1200, None)]) == pytest.approx(60e6)  # a missing reading is skipped


def test_a_holder_line_from_a_foreign_file_is_read_without_failing() -> None:
    from hicache_cli.analysis.metrics import HolderMetrics

    odd = HolderMetrics.from_line({"path": "x", "sites": [["f.py"]], "per_hour": "fast", "works": None})
    assert (odd.path, odd.site, odd.per_hour, odd.works, odd.growing) == ("x", "", None, 0, False)


def test_each_ranks_verdict_so_far_and_its_works_by_site_are_served(
    make_pp2_run: Callable[..., dict[int, list[Sample]]],
) -> None:
    samples = make_pp2_run(leaking=True)
    site = {"file": "relay.py", "line": 29, "function": "forward", "op": "isend", "created": 900, "waited": 0,
            "dropped": 0, "live": 900}  # fmt: skip
    samples[0][-5] = dataclasses.replace(samples[0][-5], sites=[site])  # the last line that carried sites
    exporter = MetricsExporter.start(None, 0, CONFIG, "runs/x")
    try:
        exporter.update(samples)
        served = scrape(exporter.url)
    finally:
        exporter.close()
    assert served["hicache_verdict"] == {labels(0, verdict="LEAK"): 1.0, labels(1, verdict="BOUNDED"): 1.0}
    at = labels(0, site="relay.py:29 in forward", op="isend")
    assert served["hicache_site_works_created_total"][at] == 900
    assert served["hicache_site_live_works"][at] == 900
