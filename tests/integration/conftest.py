"""Real runs of the real CLI: torchrun, gloo ranks, psutil. Shared per session to save time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.helpers import FORK, Run, TracedStress, hicache, rss_from_outside, stress_run, watched_stress_run


@pytest.fixture(scope="session")
def reap_pp2(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """`stress --json --metrics-port`, scraped while it runs, with `watch --metrics-port` on
    its run directory (watched_stress_run): one run for the stress tests, the report
    commands and the metrics endpoints; its run directory's name is long, so the
    `run directory:` line is far past 160 columns (never wrapped off a terminal)."""
    tmp = tmp_path_factory.mktemp("reap")
    run_dir = tmp / ("run-" + "long" * 50)
    return watched_stress_run(tmp, run_dir, "--pp", "2", "--policy", "reap", "--duration", "5s")


@pytest.fixture(scope="session")
def drain_pp2(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The README's fixed run, its ranks forked (--launcher fork): read for its report (verdicts,
    plain text, diff and plot, a baseline); reap_pp2 is the README's run through torchrun."""
    return stress_run(tmp_path_factory.mktemp("drain"), "--pp", "2", "--policy", "drain", "--duration", "8s", *FORK)


@pytest.fixture(scope="session")
def drain_gate(drain_pp2: Run, tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """`check` of drain_pp2's configuration with drain_pp2 as its baseline and a depth limit:
    the gate's pass on `drain` and the rerun of a baseline's configuration, in one run.
    (--max-rss-slope 1GB/h: 8 s is short for the absolute RSS verdict; the depth limit, the
    verdict and the baseline's assertions are what is tested.)"""
    tmp = tmp_path_factory.mktemp("drain-gate")
    args = ("check", "--json", "--policy", "drain", "--pp", "2", "--duration", "8s", "--max-depth", "2", *FORK)
    base = drain_pp2.run_dir / "report.json"
    return hicache(*args, "--max-rss-slope", "1GB/h", "--baseline", str(base), "--run-dir", str(tmp / "run"), cwd=tmp)


@pytest.fixture(scope="session")
def sglang_leaky(tmp_path_factory: pytest.TempPathFactory) -> TracedStress:
    """`stress --target sglang==0.5.14` (the last release that reaps), run under `hicache
    trace`: one run for the SGLang target's tests (the stress report) and for the tracer's
    view of SGLang's own code (the trace report). The stress's output passes through
    `trace` to its stdout; its exit code is trace's."""
    tmp = tmp_path_factory.mktemp("sglang-leaky")
    inner, outer = tmp / "run", tmp / "trace"
    stress = (sys.executable, "-m", "hicache_cli", "stress", "--target", "sglang==0.5.14", "--pp", "2")
    with rss_from_outside(inner) as external:
        proc = hicache("trace", "--no-live", "--run-dir", str(outer), "--", *stress, "--duration", "6s", "--no-live",
                       "--run-dir", str(inner), cwd=tmp)  # fmt: skip
    assert (outer / "report.json").is_file(), f"no report (exit {proc.returncode})\n{proc.stdout}\n{proc.stderr}"
    report = json.loads((inner / "report.json").read_text())
    traced = json.loads((outer / "report.json").read_text())
    return TracedStress(Run(proc, inner, report, external), Run(proc, outer, traced, external))


@pytest.fixture(scope="session")
def attached_references() -> dict[str, tuple[int, list[str]]]:
    """The attached servers' output and exit code without hicache, by policy: made once,
    beside the first server (attach_helpers.serve_beside_reference)."""
    return {}
