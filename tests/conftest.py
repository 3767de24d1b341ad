"""Builders of synthetic rank samples, as a rank's probe would write them (hicache_cli.sample)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.analysis.report import build_report, write_report
from hicache_cli.analysis.results import Report
from hicache_cli.cli import running as run_commands
from hicache_cli.config import StressConfig
from hicache_cli.execution import RunResult
from hicache_cli.histogram import LatencyHistogram
from hicache_cli.launch.nodes import NodeSpec
from hicache_cli.outcome import RunOutcome
from hicache_cli.sample import Sample
from tests import cost
from tests.sharing import GROUPS_ENV, group_by_shared_fixture, longest_first, record_groups, shared_run_scheduler

if os.environ.get("PYTEST_XDIST_WORKER"):
    # a pytest-xdist worker starts with COLUMNS=80 LINES=24 of its own; the CLI (and every
    # command the tests start) would wrap its output at 80 columns, where off a terminal
    # without COLUMNS it wraps nothing, as the tests expect
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


def pytest_configure(config: pytest.Config) -> None:
    cost.register(config)
    if not os.environ.get("PYTEST_XDIST_WORKER") and not os.environ.get(GROUPS_ENV):
        folder = tempfile.mkdtemp(prefix="hicache-test-groups-")  # the workers, started later, inherit it
        os.environ[GROUPS_ENV] = folder
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


@pytest.hookimpl(optionalhook=True)  # xdist's hook: absent under `-p no:xdist`
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    return shared_run_scheduler(config, log) if config.getvalue("dist") == "loadgroup" else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    group_by_shared_fixture(items)
    longest_first(items)
    record_groups(items)


def build_sample(rank: int = 0, t: float = 1.0, tp: int = 1, **overrides: Any) -> Sample:
    """One sample with plausible defaults; any field can be overridden."""
    fields: dict[str, Any] = {
        "t": t,
        "wall": 1_700_000_000.0 + t,
        "rank": rank,
        "pp_rank": rank // tp,
        "tp_rank": rank % tp,
        "pid": 1000 + rank,
        "state": "running",
        "rss_bytes": 100_000_000,
        "depth": 0,
        "held_bytes": 0,
        "rounds": 0,
        "lat_p50_ms": None,
        "lat_p99_ms": None,
        "lat_max_ms": None,
        "lat_count": 0,
        "round_age_s": 0.0001,
        "sent": 0,
        "received": 0,
    }
    fields.update(overrides)
    return Sample(**fields)


def bounded_noise(n: int, amplitude: float, seed: int) -> list[float]:
    """n draws of uniform noise in [-amplitude, amplitude], the same on every run."""
    rng = random.Random(seed)
    return [rng.uniform(-amplitude, amplitude) for _ in range(n)]


def build_series(
    rank: int = 0,
    *,
    n: int = 600,
    hz: float = 10.0,
    tp: int = 1,
    rss0: float = 100e6,
    rss_per_s: float = 0.0,
    rss_noise: float = 0.0,
    noise_seed: int = 1,
    depth_per_s: float = 0.0,
    sent_per_s: float = 0.0,
    received_per_s: float = 0.0,
    rounds_per_s: float = 1000.0,
    latency_s: Callable[[float], float] = lambda t: 0.001,
    final: bool = True,
    final_state: str = "done",
    message: str = "reached the deadline",
    error: tuple[str, int | None] | None = None,
) -> list[Sample]:
    """A rank's samples at `hz` for n samples: linear RSS (plus bounded noise), depth and counters.

    Each sample's rounds all took `latency_s(t)`; the histogram is cumulative, as the probe writes it.
    """
    hist = LatencyHistogram()
    noise = bounded_noise(n, rss_noise, noise_seed)
    out: list[Sample] = []
    previous_rounds = 0
    for i in range(n):
        t = round((i + 1) / hz, 4)
        rounds = int(rounds_per_s * t)
        new_rounds = rounds - previous_rounds
        previous_rounds = rounds
        lat = latency_s(t)
        hist.add_all([lat] * new_rounds)
        last = i == n - 1 and final
        out.append(
            build_sample(
                rank,
                t,
                tp,
                state=final_state if last else "running",
                rss_bytes=int(rss0 + rss_per_s * t + noise[i]),
                depth=int(depth_per_s * t),
                held_bytes=int(depth_per_s * t) * 8,
                rounds=rounds,
                lat_p50_ms=lat * 1000 if new_rounds else None,
                lat_p99_ms=lat * 1000 if new_rounds else None,
                lat_max_ms=lat * 1000 if new_rounds else None,
                lat_count=new_rounds,
                sent=int(sent_per_s * t),
                received=int(received_per_s * t),
                lat_hist=hist.to_json(),
                kind="final" if last else "sample",
                message=message if last else None,
                error_kind=error[0] if last and error else None,
                error_peer=error[1] if last and error else None,
            )
        )
    return out


@pytest.fixture
def make_sample() -> Callable[..., Sample]:
    return build_sample


@pytest.fixture
def make_series() -> Callable[..., list[Sample]]:
    return build_series


def report_json(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """build_report's report as it is written (its JSON), for tests that read the file's keys."""
    return build_report(*args, **kwargs).to_dict()


PP2_LEAK_RSS_PER_S = 50_000.0  # bytes per second: 180 MB/h


def build_pp2_run(
    *, leaking: bool = True, n: int = 600, final: bool = True, rounds_per_s: float = 1000.0
) -> dict[int, list[Sample]]:
    """Both stages of a pp=2 run at 10 Hz for n samples (60 s by default), without noise.

    Leaking (`reap`): stage 0 keeps every send, so its depth grows 1000 Works/s and its RSS
    PP2_LEAK_RSS_PER_S; stage 1 only receives and stays flat. Bounded (`drain`): both flat, depth 0.
    """
    sends = rounds_per_s
    return {
        0: build_series(
            0,
            n=n,
            rss_per_s=PP2_LEAK_RSS_PER_S if leaking else 0.0,
            depth_per_s=sends if leaking else 0.0,
            sent_per_s=sends,
            rounds_per_s=rounds_per_s,
            final=final,
        ),
        1: build_series(1, n=n, received_per_s=sends, rounds_per_s=rounds_per_s, final=final),
    }


def build_pp2_report(*, leaking: bool = True, **run_options: Any) -> Report:
    """The report of build_pp2_run's run: policy `reap` when leaking, `drain` when not; 60 s."""
    config = StressConfig(pp=2, policy="reap" if leaking else "drain", duration_s=60.0)
    return build_report(config, build_pp2_run(leaking=leaking, **run_options), RunOutcome(wall_s=61.5))


@pytest.fixture
def make_pp2_run() -> Callable[..., dict[int, list[Sample]]]:
    return build_pp2_run


@pytest.fixture
def make_pp2_report() -> Callable[..., Report]:
    return build_pp2_report


# What faulthandler writes to rank-N.stacks.txt when the watchdog sends SIGUSR1 to a rank
# whose loop is blocked in drain's wait(): the probe thread, the copy-stream thread, and the
# main thread (the one that took the signal) with run_loop among its frames.
PROBE_THREAD_STACK = """\
Thread 0x00007f3a9bfff640 (most recent call first):
  File "/work/main/hicache_cli/rank/probe.py", line 199 in _sample_until_stopped
  File "/work/main/hicache_cli/rank/probe.py", line 190 in _run
  File "/usr/lib/python3.11/threading.py", line 975 in run
  File "/usr/lib/python3.11/threading.py", line 1038 in _bootstrap_inner
  File "/usr/lib/python3.11/threading.py", line 995 in _bootstrap
"""
COPY_STREAM_THREAD_STACK = """\
Thread 0x00007f3aa4bff640 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/usr/lib/python3.11/queue.py", line 171 in get
  File "/work/main/hicache_model/streams.py", line 78 in _run
  File "/usr/lib/python3.11/threading.py", line 975 in run
  File "/usr/lib/python3.11/threading.py", line 1038 in _bootstrap_inner
  File "/usr/lib/python3.11/threading.py", line 995 in _bootstrap
"""
MAIN_THREAD_STACK = """\
Current thread 0x00007f3ab1e4b740 (most recent call first):
  File "/work/main/hicache_model/work_list.py", line 100 in wait
  File "/work/main/hicache_model/policies.py", line 95 in at_round_start
  File "/work/main/hicache_model/hiradix_cache.py", line 164 in check_hicache_events
  File "/work/main/hicache_model/scheduler.py", line 25 in run_round
  File "/work/main/hicache_cli/rank/entry.py", line 163 in run_loop
  File "/work/main/hicache_cli/rank/entry.py", line 125 in main
  File "/work/main/hicache_cli/rank/entry.py", line 203 in <module>
  File "<frozen runpy>", line 88 in _run_code
  File "<frozen runpy>", line 198 in _run_module_as_main
"""


@pytest.fixture
def stack_dump() -> str:
    """A rank's stack dump, as faulthandler writes it, with the loop blocked in drain's wait()."""
    return "\n".join((PROBE_THREAD_STACK, COPY_STREAM_THREAD_STACK, MAIN_THREAD_STACK))


class FakeExecute:
    """Stands in for hicache_cli.execution.execute, the one call through which a command launches ranks.

    Nothing is launched. Each call records what the command passed and "runs" build_pp2_run's
    two stages for the configured duration at 10 Hz: leaking for `reap`, bounded for every
    other policy. Like the launcher it hands the samples to the view and asks `early_stop`
    (here after every sample, where the launcher polls twice a second) and ends the run where
    it gives a reason; like execute it builds the report and writes it into the run directory
    and the copy. Set `final = False` for a run whose ranks crashed, `interrupted = True` for
    one stopped by Ctrl-C.
    """

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.final = True
        self.interrupted = False

    def __call__(
        self,
        config: StressConfig,
        run_dir: Path,
        on_tick: Callable[[dict[int, list[Sample]], float], None],
        port: int | None = None,
        report_copy: Path | None = None,
        refresh_s: float = 0.5,
        early_stop: Callable[[dict[int, list[Sample]]], str | None] | None = None,
        nodes: NodeSpec | None = None,
        passthrough: bool = True,
        passthrough_to_stderr: bool = False,
        on_attached: Any = None,
    ) -> RunResult:
        self.calls.append(
            {"config": config, "run_dir": run_dir, "report_copy": report_copy, "early_stop": early_stop, "nodes": nodes}
        )
        leaking = config.label == "reap"
        n, stopped = round(config.duration_s * 10), None
        if early_stop is not None:
            whole = build_pp2_run(leaking=leaking, n=n)
            for k in range(1, n + 1):
                stopped = early_stop({rank: series[:k] for rank, series in whole.items()})
                if stopped is not None:
                    n = k  # every rank stops as at its deadline, with its final line
                    break
        samples = build_pp2_run(leaking=leaking, n=n, final=self.final)
        on_tick(samples, n / 10 + 1.0)
        outcome = RunOutcome(interrupted=self.interrupted, wall_s=n / 10 + 1.5, stopped_early=stopped)
        report = build_report(config, samples, outcome, run_dir)
        path = write_report(report, run_dir, report_copy)
        return RunResult(run_dir, path, report.at(path))


@pytest.fixture
def fake_execute(monkeypatch: pytest.MonkeyPatch) -> FakeExecute:
    """Commands run against FakeExecute instead of real ranks."""
    fake = FakeExecute()
    monkeypatch.setattr(run_commands, "execute", fake)
    return fake


def free_port() -> int:
    """A TCP port on the loopback that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def assert_refused(
    argv: list[str], start: str, capsys: pytest.CaptureFixture[str], fake_execute: Any, tmp_path: Path
) -> None:
    """Bad input: exit 2, one `hicache: error: <start>...` line, no traceback, nothing run or made."""
    from hicache_cli.cli.main import main

    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"hicache: error: {start}")
    assert "Traceback" not in captured.err + captured.out
    assert fake_execute.calls == []
    assert list(tmp_path.iterdir()) == []  # refused before making a run directory


@pytest.fixture
def no_hang() -> Iterator[None]:
    """For tests of what must never block (a FIFO opened, read or written): a regression
    fails the test after 10 s (SIGALRM interrupts the blocked call) instead of hanging the suite."""

    def hung(signo: int, frame: object) -> None:
        raise TimeoutError("blocked: opened or read without O_NONBLOCK")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
