"""The production examples under deploy/ (docs/attach.md, "In production"): each is valid for
the tool that reads it, and every hicache option and metric it names is one hicache has."""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from hicache_cli.cli.main import app
from hicache_cli.config import RunConfig
from hicache_cli.present.metrics_exporter import MetricsExporter
from hicache_cli.sample import Sample
from hicache_cli.targets import FollowedProcess
from tests.present.test_metrics import scrape

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
ALERTS = DEPLOY / "prometheus" / "hicache-alerts.yml"
UNIT = DEPLOY / "systemd" / "hicache-follow@.service"
POD = DEPLOY / "kubernetes" / "sglang-hicache-sidecar.yaml"
RULE_TESTS = Path(__file__).resolve().parent / "data" / "deploy" / "alerts_test.yml"


def attach_command() -> Any:
    return typer.main.get_command(app).commands["attach"]  # type: ignore[attr-defined] - a group of commands


def shell_words(line: str) -> list[str]:
    """A shell command line's words, each expansion (`$(...)`, `$pid`) given the stand-in 1."""
    return shlex.split(re.sub(r"\$\([^)]*\)|\$\w+", "1", line))


def parses_as_attach(words: list[str]) -> dict[str, Any]:
    """The words after `attach`, parsed by hicache's own command line: an option hicache does
    not have, or a value it refuses, fails here."""
    return attach_command().make_context("attach", words, resilient_parsing=False).params


def followed_samples() -> dict[int, list[Sample]]:
    holder = {
        "path": "Relay.inflight[<int>]",
        "container": "dict",
        "works": 5000,
        "completed": 0,
        "named": True,
        "per_hour": 250000.0,
        "growing": True,
        "sites": [["/srv/relay.py", 29, "forward", 120]],
    }
    out = {}
    for rank in (0, 1):
        series = [
            Sample(
                t=float(t),
                wall=1e9 + t,
                rank=rank,
                pp_rank=rank,
                tp_rank=0,
                pid=100 + rank,
                state="running",
                rss_bytes=200_000_000 + t * 50_000,
                depth=5000 if rank == 0 else 0,
                held_bytes=0,
                rounds=0,
                lat_p50_ms=None,
                lat_p99_ms=None,
                lat_max_ms=None,
                lat_count=0,
                round_age_s=0.0,
                sent=0,
                received=0,
                holders=[holder] if rank == 0 else [],
            )  # fmt: skip
            for t in range(0, 121, 10)
        ]
        out[rank] = series
    return out


# -- the alerting rules ---------------------------------------------------------------------


def rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(ALERTS.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def test_the_alert_rules_are_prometheus_rule_groups() -> None:
    loaded = yaml.safe_load(ALERTS.read_text())
    assert [g["name"] for g in loaded["groups"]] == ["hicache"]
    for rule in rules():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule["alert"])
        assert re.fullmatch(r"\d+[smh]", rule["for"])
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert rule["expr"].count("(") == rule["expr"].count(")")


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Prometheus) is not installed")
def test_promtool_accepts_the_alert_rules() -> None:
    done = subprocess.run(["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Prometheus) is not installed")
def test_the_alerts_fire_on_a_growing_holder_with_its_holder_and_line() -> None:
    """promtool's own evaluation of the rules on series a sidecar serves (tests/data/deploy):
    the holder that starts growing at 1 minute fires at 2 (`for: 1m`), the bounded one never."""
    done = subprocess.run(["promtool", "test", "rules", str(RULE_TESTS)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_growing_alert_names_the_holder_and_the_line() -> None:
    growing = next(r for r in rules() if r["alert"] == "HicacheWorksGrowing")
    text = growing["annotations"]["summary"] + growing["annotations"]["description"]
    assert "{{ $labels.holder }}" in text and "{{ $labels.site }}" in text and "{{ $labels.rank }}" in text


def test_every_metric_the_rules_read_is_served() -> None:
    used = {name for rule in rules() for name in re.findall(r"\bhicache_[a-z_]+", rule["expr"])}
    config = RunConfig(target=FollowedProcess(pids=(1,)))
    exporter = MetricsExporter.start(None, 0, config, "runs/x")
    try:
        exporter.update(followed_samples())
        served = scrape(exporter.url)
    finally:
        exporter.close()
    assert used <= set(served)
    growing = served["hicache_holder_growing"]
    (labels, value), = growing.items()  # fmt: skip
    assert dict(labels)["holder"] == "Relay.inflight[<int>]"
    assert dict(labels)["site"] == "/srv/relay.py:29 in forward"
    assert value == 1.0
    assert served["hicache_holder_growth_per_hour"][labels] == 250000.0
    assert served["hicache_rss_growth_bytes_per_hour"]  # two minutes of RSS readings: a trend


def test_the_grafana_dashboard_has_a_panel_for_growing_holders() -> None:
    import json

    dashboard = json.loads((Path(__file__).resolve().parents[1] / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert any("hicache_holder_works" in e for e in exprs)
    assert any("hicache_holder_growing" in e for e in exprs)


# -- the systemd unit -------------------------------------------------------------------------


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign] - systemd's keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser


def test_the_unit_stops_the_sidecar_cleanly_with_its_service() -> None:
    parsed = unit()
    assert set(parsed.sections()) == {"Unit", "Service", "Install"}
    assert parsed["Unit"]["BindsTo"] == "%i.service" and parsed["Unit"]["After"] == "%i.service"
    service = parsed["Service"]
    assert service["KillSignal"] == "SIGTERM"
    assert "143" in service["SuccessExitStatus"].split()  # hicache's exit on SIGTERM: 128 + 15


def test_the_units_command_is_an_attach_hicache_parses() -> None:
    exec_start = unit()["Service"]["ExecStart"].replace("\\\n", " ")
    inner = shlex.split(exec_start)[2]  # /bin/sh -c '...'
    words = shell_words(inner.replace("%%", "%"))
    assert words[:3] == ["exec", "/opt/hicache/bin/hicache", "attach"]
    params = parses_as_attach(words[3:])
    assert params["follow"] and params["metrics_port"] == 9477


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    served = tmp_path / "sglang.service"
    served.write_text("[Service]\nExecStart=/bin/true\n")
    instance = tmp_path / "hicache-follow@sglang.service"
    shutil.copy(UNIT, instance)
    env = {"SYSTEMD_UNIT_PATH": f"{tmp_path}:", "PATH": "/usr/bin:/bin"}  # the units given, then systemd's own
    verify = ["systemd-analyze", "verify", "--man=no", str(served), str(instance)]
    done = subprocess.run(verify, capture_output=True, text=True, env=env)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


# -- the Kubernetes pod -----------------------------------------------------------------------


def pod() -> dict[str, Any]:
    loaded = yaml.safe_load(POD.read_text())
    assert isinstance(loaded, dict)
    return loaded


def sidecar() -> dict[str, Any]:
    return next(c for c in pod()["spec"]["containers"] if "attach --follow" in " ".join(c.get("args", [])))


def test_the_pod_shares_its_process_namespace_and_lets_the_sidecar_trace() -> None:
    spec = pod()
    assert spec["apiVersion"] == "v1" and spec["kind"] == "Pod"
    assert spec["spec"]["shareProcessNamespace"] is True
    assert "SYS_PTRACE" in sidecar()["securityContext"]["capabilities"]["add"]
    for container in spec["spec"]["containers"]:
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", container["name"]) and container["image"]


def test_the_server_reads_and_writes_where_the_sidecar_puts_hicache() -> None:
    """The agent runs inside the server's Python: it imports hicache, and writes its files, at
    the path the sidecar uses; so both containers mount the same volume at the same path."""
    spec = pod()["spec"]
    volumes = {v["name"] for v in spec["volumes"]}
    mounts = [
        {(m["name"], m["mountPath"]) for m in c["volumeMounts"] if not m.get("readOnly")} for c in spec["containers"]
    ]
    shared = set.intersection(*mounts)
    assert shared and {name for name, _ in shared} <= volumes
    path = next(iter(shared))[1]
    script = sidecar()["args"][0]
    assert f"PYTHONPATH={path}/" in script and f"--run-dir {path}/" in script


def test_the_sidecars_command_is_an_attach_hicache_parses_and_serves_the_scraped_port() -> None:
    line = next(line for line in sidecar()["args"][0].splitlines() if "attach --follow" in line)
    words = shell_words(line)
    params = parses_as_attach(words[words.index("attach") + 1 :])
    assert params["follow"] and params["metrics_host"] == "0.0.0.0"
    port = params["metrics_port"]
    assert {p["containerPort"] for p in sidecar()["ports"]} == {port}
    assert pod()["metadata"]["annotations"]["prometheus.io/port"] == str(port)
