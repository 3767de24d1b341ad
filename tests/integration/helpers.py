"""Running the real CLI in a subprocess and watching its ranks from outside."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from scripts.rss_crosscheck import ExternalRss, watch_rss
from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]
# hicache's ranks forked from one process that imported torch once (`--launcher fork`), for a
# test of what a run reports (verdicts, faults, gates, pages): ~1.5 CPU-s and ~1 s less a run
# than torchrun's interpreters. The runs that stay on torchrun: the README's reap run (the
# shared reap_pp2), signals to torchrun and to hicache (lifecycle, Ctrl-C), a SIGKILLed rank
# (torchrun's failure summary), the API docs' snippet, the nodes, SGLang's leaky release traced,
# a stress rank attached to, the users' directory not shadowing hicache's modules.
# Their rounds are paced as a GPU server's are (`--round-time 2ms`: ~460 rounds/s on two
# stages, a third of a core a rank where an unpaced rank spins a whole one): what a run reports
# does not need the CPU's full speed, and a spinning rank takes its core from the tests beside it.
PACED = ("--round-time", "2ms")
FORK = ("--launcher", "fork", *PACED)


def sigint_as_at_a_terminal() -> None:
    """A child's `preexec_fn`: SIGINT back to its default, so Python in the child turns it
    into KeyboardInterrupt, as Ctrl-C at a terminal would. A suite run as a background job
    (`pytest ... &` from a script) ignores SIGINT, and children inherit that; the CLI
    installs its own handler, but a library or pytest rightly keeps what it inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def hicache(
    *args: str, cwd: Path, timeout: float = 180, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess; `env` is added to (or, a value of "", taken from) ours."""
    env = {k: v for k, v in {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}.items() if v != ""}
    return subprocess.run(
        [sys.executable, "-m", "hicache_cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


Scrape = dict[str, dict[tuple[tuple[str, str], ...], float]]  # metric -> labels -> value


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    run_dir: Path
    report: dict[str, Any]
    external: ExternalRss
    stress_scrapes: list[Scrape] = field(default_factory=list)  # watched_stress_run's
    watch_scrapes: list[Scrape] = field(default_factory=list)


@dataclass
class TracedStress:
    """A stress run made under `hicache trace`: two reports of the same processes."""

    stress: Run  # the stress run's own (run_dir: its run directory)
    traced: Run  # the trace's


@contextlib.contextmanager
def rss_from_outside(run_dir: Path) -> Iterator[ExternalRss]:
    """The ranks' RSS read from outside (psutil) while the block runs."""
    external = ExternalRss()
    stop = threading.Event()
    watcher = threading.Thread(target=watch_rss, args=(run_dir, stop, external), daemon=True)
    watcher.start()
    try:
        yield external
    finally:
        stop.set()
        watcher.join()


def stress_run(tmp: Path, *args: str) -> Run:
    run_dir = tmp / "run"
    with rss_from_outside(run_dir) as external:
        proc = hicache("stress", "--no-live", "--run-dir", str(run_dir), *args, cwd=tmp)
    report = json.loads((run_dir / "report.json").read_text())
    return Run(proc, run_dir, report, external)


def watched_stress_run(tmp: Path, run_dir: Path, *args: str) -> Run:
    """`stress --json --metrics-port` as stress_run, scraped as Prometheus would while it
    runs, and `watch --metrics-port` on its run directory, scraped too."""
    stress_port, watch_port = free_port(), free_port()
    stress = popen("stress", "--json", "--metrics-port", str(stress_port), "--run-dir", str(run_dir), *args, cwd=tmp)
    stress_scrapes: list[Scrape] = []
    watch_scrapes: list[Scrape] = []
    watcher = None

    def poll() -> None:
        nonlocal watcher
        while stress.poll() is None:
            if watcher is None and (run_dir / "config.json").is_file():
                watcher = popen("watch", str(run_dir), "--no-live", "--metrics-port", str(watch_port), cwd=tmp)
            for port, scrapes in ((stress_port, stress_scrapes), (watch_port, watch_scrapes)):
                if (found := scrape(port)) is not None:
                    scrapes.append(found)
            time.sleep(0.3)

    scraper = threading.Thread(target=poll)
    with rss_from_outside(run_dir) as external:
        scraper.start()
        try:
            stdout, stderr = stress.communicate(timeout=180)
        finally:
            scraper.join()
            if watcher is not None:
                watcher.wait(timeout=60)  # it ends with the run (the report appears)
    proc = subprocess.CompletedProcess(stress.args, stress.returncode, stdout, stderr)
    report = json.loads((run_dir / "report.json").read_text())
    return Run(proc, run_dir, report, external, stress_scrapes, watch_scrapes)


def scrape(port: int) -> Scrape | None:
    """/metrics parsed as a Prometheus server reads it; None while nothing listens."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return None
    found: Scrape = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def popen(*args: str, cwd: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "hicache_cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
