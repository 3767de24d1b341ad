"""Early stopping: when the Settler calls a verdict settled, how the launcher passes that on
to the ranks (SIGUSR2), and how a rank's probe turns it into its deadline."""

from __future__ import annotations

import io
import math
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.analysis.assess import assess_rank
from hicache_cli.analysis.settle import CONFIRMATIONS, MIN_BOUNDED_S, MIN_LEAK_S, Settler
from hicache_cli.cli.configure import trace_config
from hicache_cli.cli.options import Measurement
from hicache_cli.config import StressConfig
from hicache_cli.launch import launcher
from hicache_cli.protocol import EARLY_STOP
from hicache_cli.rank import probe as probe_module
from hicache_cli.rank.probe import LoopStats, Probe, RankIdentity, Readings
from hicache_cli.sample import Sample, decode_lines
from tests.fakes import FakeSiginfo

MakeRun = Callable[..., dict[int, list[Sample]]]
MakeSeries = Callable[..., list[Sample]]

WARMUP_S = 3.0
CONFIG = StressConfig(pp=2, duration_s=60.0, warmup_s=WARMUP_S, leak_threshold_mb_per_h=100.0)
HZ = 10  # conftest's series: one sample per 0.1 s


def every_second(run: dict[int, list[Sample]]) -> Iterator[tuple[float, dict[int, list[Sample]]]]:
    """The run as the launcher would see it once a second of run time: (t, samples so far)."""
    n = min(len(s) for s in run.values())
    for k in range(HZ, n + 1, HZ):
        yield k / HZ, {rank: series[:k] for rank, series in run.items()}


def every_sample(run: dict[int, list[Sample]]) -> Iterator[dict[int, list[Sample]]]:
    n = min(len(s) for s in run.values())
    for k in range(1, n + 1):
        yield {rank: series[:k] for rank, series in run.items()}


def first_settled(settler: Settler, run: dict[int, list[Sample]]) -> tuple[float, str] | None:
    for t, seen in every_second(run):
        reason = settler(seen)
        if reason is not None:
            return t, reason
    return None


class CheckSpy:
    """Wraps a Settler's `current` to record the run time of every check it makes."""

    def __init__(self, settler: Settler) -> None:
        self.times: list[float] = []
        self._current = settler.current
        settler.current = self  # type: ignore[method-assign]

    def __call__(self, series: list[list[Sample]]) -> tuple[str | None, float]:
        self.times.append(max(s[-1].t for s in series))
        return self._current(series)


def test_a_leak_settles_after_min_leak_s_and_the_confirmations(make_pp2_run: MakeRun) -> None:
    settled = first_settled(Settler(CONFIG), make_pp2_run(leaking=True, n=200))

    # Checked once a second: the first check with MIN_LEAK_S of post-warm-up data, then
    # CONFIRMATIONS - 1 more that agree.
    expected = WARMUP_S + math.ceil(MIN_LEAK_S) + CONFIRMATIONS - 1
    assert settled == (
        expected,
        f"LEAK settled after {expected:.1f} s of workload ({expected - WARMUP_S:.1f} s after warm-up)",
    )


def test_a_leak_is_plain_before_min_leak_s_but_does_not_settle_yet(make_pp2_run: MakeRun) -> None:
    run = make_pp2_run(leaking=True, n=200)
    t = WARMUP_S + math.ceil(MIN_LEAK_S) - 1.0
    seen = [series[: round(t * HZ)] for series in run.values()]
    assert assess_rank(seen[0], WARMUP_S, CONFIG.leak_threshold_mb_per_h).verdict.verdict == "LEAK"

    verdict, span = Settler(CONFIG).current(seen)
    assert verdict is None
    assert span == pytest.approx(t - WARMUP_S)
    assert span < MIN_LEAK_S


def test_a_bounded_run_settles_only_after_min_bounded_s(make_pp2_run: MakeRun) -> None:
    run = make_pp2_run(leaking=False, n=400)
    settled = first_settled(Settler(CONFIG), run)

    expected = WARMUP_S + math.ceil(MIN_BOUNDED_S) + CONFIRMATIONS - 1
    assert settled == (
        expected,
        f"BOUNDED settled after {expected:.1f} s of workload ({expected - WARMUP_S:.1f} s after warm-up)",
    )
    # Long before that, every rank was already BOUNDED.
    early = [series[: (int(WARMUP_S) + 5) * HZ] for series in run.values()]
    assert {assess_rank(s, WARMUP_S, 100.0).verdict.verdict for s in early} == {"BOUNDED"}


def test_an_inconclusive_run_never_settles(make_series: MakeSeries) -> None:
    # PP0's RSS grows at about the threshold (100 MB/h = 27.8 kB/s) under noise: never decidable.
    run = {0: make_series(0, n=300, rss_per_s=27_778, rss_noise=1_000_000), 1: make_series(1, n=300)}
    assert assess_rank(run[0], WARMUP_S, 100.0).verdict.verdict == "INCONCLUSIVE"

    assert first_settled(Settler(CONFIG), run) is None


def test_nothing_settles_until_every_rank_has_samples(make_pp2_run: MakeRun) -> None:
    run = make_pp2_run(leaking=True, n=200)
    settler = Settler(CONFIG)
    spy = CheckSpy(settler)
    for k in range(1, 201):
        assert settler({0: run[0][:k]}) is None
        assert settler({0: run[0][:k], 1: []}) is None
    assert spy.times == []  # not even checked

    assert first_settled(settler, run) is not None  # and once they have, it does


def test_a_traced_program_with_files_but_no_samples_yet_is_not_checked(make_pp2_run: MakeRun) -> None:
    # a traced program's world size is unknown (0): its ranks' files appear before their lines
    settler = Settler(trace_config([sys.executable], None, Measurement(duration="60s", stall_timeout="60s")))
    assert settler({}) is None
    assert settler({0: [], 1: []}) is None
    run = make_pp2_run(leaking=True, n=200)
    assert first_settled(settler, run) is not None


@pytest.mark.parametrize("leaking", [True, False])
def test_checks_at_most_once_per_second_of_run_time(make_pp2_run: MakeRun, leaking: bool) -> None:
    run = make_pp2_run(leaking=leaking, n=120)
    settler = Settler(CONFIG)
    spy = CheckSpy(settler)
    for seen in every_sample(run):
        settler(seen)
        settler(seen)  # the same samples again: no new check

    assert spy.times[0] == pytest.approx(0.1)  # as soon as every rank has a sample
    gaps = [b - a for a, b in zip(spy.times, spy.times[1:], strict=False)]
    assert all(gap >= 1.0 for gap in gaps)
    assert len(spy.times) >= 10  # and it keeps checking through the 12 s


def scripted(settler: Settler, verdicts: list[str | None]) -> list[str | None]:
    """Feed the settler one check a second whose verdict is scripted; what it returns each time."""
    answers = iter(verdicts)
    settler.current = lambda series: (next(answers), 30.0)  # type: ignore[method-assign]
    return [settler({0: [s], 1: [s]}) for s in (sample_at(t) for t in range(1, len(verdicts) + 1))]


def sample_at(t: float) -> Sample:
    return Sample(t, 0.0, 0, 0, 0, 1000, "running", 100_000_000, 0, 0, 0, None, None, None, 0, 0.0, 0, 0)


def test_the_confirmations_must_be_consecutive_and_agree() -> None:
    assert CONFIRMATIONS == 3  # the scripts below are written for three
    answers = scripted(Settler(CONFIG), ["LEAK", "LEAK", None, "LEAK", "BOUNDED", "LEAK", "LEAK", "LEAK"])
    assert [a is not None for a in answers] == [False] * 7 + [True]
    assert answers[-1].startswith("LEAK settled after 8.0 s")


# the launcher passes a settled verdict on to every rank


def test_early_stop_signals_every_rank_that_sampled(monkeypatch: pytest.MonkeyPatch, make_sample: Any) -> None:
    sent: list[tuple[int, int]] = []

    def kill(pid: int, signo: int) -> None:
        sent.append((pid, signo))
        if pid == 1002:
            raise ProcessLookupError(pid)  # already gone: the others are still told
        if pid == 1003:
            raise PermissionError(pid)

    monkeypatch.setattr(launcher.os, "kill", kill)
    ranks = launcher.TorchrunRanks(launcher.LaunchConfig(Path("."), StressConfig(pp=5)))
    samples = {
        0: [make_sample(0, t=1.0), make_sample(0, t=1.1)],
        1: [],  # never sampled: no pid to signal
        2: [make_sample(2, t=1.0)],
        3: [make_sample(3, t=1.0)],
        4: [make_sample(4, t=1.0)],
    }
    assert ranks.stop_early(samples, "LEAK settled", 0.0) is None  # the ranks end the run, as at their deadline
    assert sent == [(1000, EARLY_STOP), (1002, EARLY_STOP), (1003, EARLY_STOP), (1004, EARLY_STOP)]


# a rank's probe turns the signal into its deadline


class ScriptedSignals:
    """Stands in for signal.sigtimedwait in the probe thread: returns one scripted signal per
    wait, without waiting; a callable in the script runs in place of the wait."""

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)

    def __call__(self, sigset: object, timeout: float) -> Any:
        step = self.script.pop(0)
        return step() if callable(step) else step


def test_early_stop_moves_the_deadline_to_now_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    stats = LoopStats()
    now = time.monotonic()
    probe = Probe(RankIdentity(0, 0, 0), stats, Readings, out, 10.0, now, deadline=now + 600.0, stop_grace_s=600.0)
    seen_when_stopping: list[tuple[bool, str]] = []

    def loop_finishes() -> None:
        # What the rank's loop does once it sees stop_requested: its round ends, it writes the final line.
        seen_when_stopping.append((stats.stop_requested, probe.state))
        probe.finish("done", probe.stop_reason)

    early_stop = FakeSiginfo(si_signo=EARLY_STOP)
    monkeypatch.setattr(probe_module.signal, "sigtimedwait", ScriptedSignals([None, early_stop, loop_finishes]))

    probe._sample_until_stopped()  # returns once the final line is written

    assert probe.deadline < now + 600.0 - 300.0  # pulled in from ten minutes away
    assert probe.stop_reason == "stopped early: the verdict was settled"
    assert seen_when_stopping == [(True, "stopping")]
    lines = decode_lines(out.getvalue().splitlines())
    assert [(s.kind, s.state) for s in lines] == [("sample", "running"), ("sample", "stopping"), ("final", "done")]
    assert lines[-1].message == "stopped early: the verdict was settled"


def test_without_an_early_stop_the_reason_is_the_deadline() -> None:
    now = time.monotonic()
    probe = Probe(RankIdentity(0, 0, 0), LoopStats(), Readings, io.StringIO(), 10.0, now, now + 60.0, 1.5)
    assert probe.stop_reason == "reached the deadline"


def test_a_leak_seen_only_in_rss_needs_as_long_as_boundedness(make_series: MakeSeries) -> None:
    # RSS grows 1 GB/h on PP0 but its work list stays flat: maybe a start-up climb, maybe a
    # leak of another kind; either way it must hold for MIN_BOUNDED_S before stopping early.
    run = {0: make_series(0, n=400, rss_per_s=300_000), 1: make_series(1, n=400)}
    settled = first_settled(Settler(CONFIG), run)
    assert settled is not None
    t, reason = settled
    assert reason.startswith("LEAK settled")
    assert t == WARMUP_S + math.ceil(MIN_BOUNDED_S) + CONFIRMATIONS - 1
