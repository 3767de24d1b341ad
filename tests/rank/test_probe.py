"""probe: latency summaries and the samples a probe takes (its thread is never started here)."""

from __future__ import annotations

import io
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.histogram import LatencyHistogram, bucket_of
from hicache_cli.protocol import EARLY_STOP, STOP_SIGNALS
from hicache_cli.rank import loop_stats
from hicache_cli.rank import probe as probe_module
from hicache_cli.rank.probe import RING, LoopStats, Probe, RankIdentity, Readings, latency_summary
from hicache_cli.sample import Sample
from tests.fakes import BOGUS_SIGINFOS, FakeSiginfo


def test_latency_summary_of_nothing() -> None:
    assert latency_summary([]) == (None, None, None)


def test_latency_summary_in_milliseconds() -> None:
    latencies = [k / 1000 for k in range(100, 0, -1)]  # 1..100 ms, unordered
    p50, p99, worst = latency_summary(latencies)
    assert p50 == pytest.approx(51.0)
    assert p99 == pytest.approx(100.0)
    assert worst == pytest.approx(100.0)
    assert latency_summary([0.002]) == pytest.approx((2.0, 2.0, 2.0))


class CountingReader:
    """Stands in for the rank's cache-side read(): returns set readings, counts calls."""

    def __init__(self, readings: Readings) -> None:
        self.readings = readings
        self.calls = 0

    def __call__(self) -> Readings:
        self.calls += 1
        return self.readings


def make_probe(stats: LoopStats, read: CountingReader, out: io.StringIO) -> Probe:
    now = time.monotonic()
    return Probe(
        RankIdentity(rank=3, pp_rank=1, tp_rank=1),
        stats,
        read,
        out,
        hz=10.0,
        started=now - 5.0,
        deadline=now + 60.0,
        stop_grace_s=1.5,
    )


@pytest.fixture
def reader() -> CountingReader:
    return CountingReader(
        Readings(depth=42, held_bytes=336, sent=100, received=99, blocked_on="recv from rank 1", counters={"w": 1.0})
    )


def test_sample_reports_readings_and_loop_stats(reader: CountingReader) -> None:
    stats = LoopStats(rounds=4)
    out = io.StringIO()
    probe = make_probe(stats, reader, out)  # the probe counts rounds from here on
    for seconds in (0.001, 0.002, 0.010):
        stats.record(seconds)

    sample = probe.sample()

    assert (sample.rank, sample.pp_rank, sample.tp_rank) == (3, 1, 1)
    assert (sample.depth, sample.held_bytes, sample.sent, sample.received) == (42, 336, 100, 99)
    assert sample.blocked_on == "recv from rank 1"
    assert sample.counters == {"w": 1.0}
    assert sample.rounds == 7
    assert sample.lat_count == 3
    assert sample.lat_p50_ms == pytest.approx(2.0)
    assert sample.lat_max_ms == pytest.approx(10.0)
    assert (sample.state, sample.kind, sample.message) == ("running", "sample", None)
    assert sample.t >= 5.0
    assert sample.round_age_s >= 0.0
    assert isinstance(sample.rss_bytes, int) and sample.rss_bytes > 0
    assert reader.calls == 1
    assert probe.sample().lat_count == 0  # taken, so the next sample covers only newer rounds
    assert out.getvalue() == ""  # taking a sample writes nothing


def test_the_latency_histogram_is_cumulative(reader: CountingReader) -> None:
    stats = LoopStats()
    probe = make_probe(stats, reader, io.StringIO())
    for _ in range(4):
        stats.record(0.001)
    first = probe.sample()
    for _ in range(2):
        stats.record(0.05)
    second = probe.sample()
    third = probe.sample()  # no rounds finished since

    assert LatencyHistogram.from_json(first.lat_hist).counts == {bucket_of(0.001): 4}
    assert LatencyHistogram.from_json(second.lat_hist).counts == {bucket_of(0.001): 4, bucket_of(0.05): 2}
    assert third.lat_hist == second.lat_hist
    assert (second.lat_count, third.lat_count) == (2, 0)
    assert (third.lat_p50_ms, third.lat_p99_ms, third.lat_max_ms) == (None, None, None)


def test_an_rss_that_cannot_be_read_is_none(reader: CountingReader, tmp_path: Path) -> None:
    probe = make_probe(LoopStats(), reader, io.StringIO())
    probe._statm = loop_stats.ProcFile(str(tmp_path / "no-proc-here"), loop_stats.STATM_BYTES)
    assert probe.sample().rss_bytes is None
    assert loop_stats.rss_bytes(loop_stats.ProcFile(str(tmp_path / "no-proc-here"), 256, keep=False)) is None


def open_files() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_proc_file_is_read_anew_through_one_kept_descriptor_until_closed() -> None:
    statm = loop_stats.ProcFile(loop_stats.STATM, 256)
    before = open_files()
    first = loop_stats.rss_bytes(statm)
    kept = open_files() - before
    grown = bytearray(64 << 20)  # 64 MiB touched: RSS grows
    second = loop_stats.rss_bytes(statm)
    assert len(kept) == 1 and open_files() - before == kept  # the same one file, read again
    assert first is not None and second is not None and second >= first + (48 << 20)
    del grown
    statm.close()
    assert open_files() - before == set()
    assert loop_stats.rss_bytes(statm) is not None  # after close: opened and closed again
    assert open_files() - before == set()


def test_a_proc_file_is_opened_again_in_a_forked_child(monkeypatch: pytest.MonkeyPatch) -> None:
    statm, opened, real_open = loop_stats.ProcFile(loop_stats.STATM, 256), [], os.open
    monkeypatch.setattr(loop_stats.os, "open", lambda *args: opened.append(args) or real_open(*args))
    before = open_files()
    statm.read()
    statm.read()
    assert len(opened) == 1
    monkeypatch.setattr(loop_stats.os, "getpid", lambda: -1)  # as after a fork
    statm.read()
    assert len(opened) == 2 and statm._pid == -1
    assert len(open_files() - before) == 1  # the parent's copy given back
    statm.close()
    assert open_files() - before == set()


def test_a_proc_file_the_program_closed_under_it_is_opened_again() -> None:
    statm = loop_stats.ProcFile(loop_stats.STATM, 256)
    statm.read()
    os.close(statm._fd)  # as a program's os.closerange would
    assert loop_stats.rss_bytes(statm) is not None
    statm.close()


def test_the_final_line_closes_the_probes_proc_files(reader: CountingReader) -> None:
    before = open_files()
    probe = make_probe(LoopStats(), reader, io.StringIO())
    probe.sample(kind="final")  # reads both files
    assert len(open_files() - before) == 2
    probe.finish("done", "reached the deadline")
    assert open_files() - before == set()


def test_finish_writes_one_final_line_once(reader: CountingReader) -> None:
    out = io.StringIO()
    probe = make_probe(LoopStats(rounds=9), reader, out)
    probe.finish("done", "reached the deadline")
    probe.finish("error", "a second finish is ignored")

    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    final = Sample.from_dict(json.loads(lines[0]))
    assert (final.kind, final.state, final.message) == ("final", "done", "reached the deadline")
    assert final.rounds == 9
    assert final.depth == 42


def test_more_rounds_than_the_ring_holds_are_counted_and_the_newest_kept(reader: CountingReader) -> None:
    stats = LoopStats()
    probe = make_probe(stats, reader, io.StringIO())
    for _ in range(RING):
        stats.record(0.001)
    for _ in range(100):
        stats.record(0.5)  # the newest rounds overwrite the oldest
    sample = probe.sample()
    assert sample.lat_count == RING + 100
    assert sample.lat_max_ms == pytest.approx(500.0)
    assert LatencyHistogram.from_json(sample.lat_hist).total == RING  # what the ring held


def test_two_finishes_at_once_write_one_final_line_from_one_of_them() -> None:
    """A stop signal (the probe thread) and the loop's error (the main thread) can finish a
    rank at the same moment; the final line is one caller's state, message and signal."""
    entered = threading.Event()

    def slow_read() -> Readings:
        entered.set()
        time.sleep(0.05)  # the other caller arrives while the final line is being built
        return Readings()

    out = io.StringIO()
    probe = make_probe(LoopStats(), slow_read, out)  # type: ignore[arg-type]
    signalled = threading.Thread(target=probe.finish, args=("interrupted", "stopped by SIGTERM", "SIGTERM"))
    signalled.start()
    entered.wait(5)
    probe.finish("error", "RuntimeError: Connection reset by peer")
    signalled.join(5)

    (line,) = out.getvalue().splitlines()
    final = json.loads(line)
    assert (final["state"], final["message"], final["signal"]) == ("interrupted", "stopped by SIGTERM", "SIGTERM")


# a siginfo nothing filled in (ptrace on some kernels) is not a signal


@pytest.mark.parametrize("bogus", BOGUS_SIGINFOS)
def test_a_bogus_siginfo_is_not_a_signal_and_the_wait_goes_on(monkeypatch: pytest.MonkeyPatch, bogus: Any) -> None:
    waits: list[float] = []
    script = [bogus, FakeSiginfo(si_signo=signal.SIGTERM)]

    def sigtimedwait(signals: Any, timeout: float) -> Any:
        waits.append(timeout)
        return script.pop(0)

    monkeypatch.setattr(probe_module.signal, "sigtimedwait", sigtimedwait)
    assert not probe_module.plausible(bogus, STOP_SIGNALS)
    assert probe_module.wait_for_signal(STOP_SIGNALS, 30.0) == signal.SIGTERM
    assert len(waits) == 2 and 0 < waits[1] <= 30.0  # the rest of the same wait, not a new one


def test_a_bogus_siginfo_at_the_end_of_the_wait_is_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    script = [BOGUS_SIGINFOS[0], None]
    monkeypatch.setattr(probe_module.signal, "sigtimedwait", lambda signals, timeout: script.pop(0))
    assert probe_module.wait_for_signal(STOP_SIGNALS, 0.05) is None


@pytest.mark.parametrize(
    "info",
    [
        FakeSiginfo(si_signo=signal.SIGTERM),  # kill() from torchrun or hicache
        FakeSiginfo(si_signo=signal.SIGINT, si_code=probe_module.SI_KERNEL, si_pid=0),  # a terminal's Ctrl-C
        FakeSiginfo(si_signo=signal.SIGHUP, si_code=probe_module.SI_TKILL),  # tgkill
        FakeSiginfo(si_signo=EARLY_STOP, si_code=probe_module.SI_QUEUE, si_uid=1000),  # sigqueue
    ],
)
def test_every_real_way_a_stop_signal_arrives_is_plausible(info: Any) -> None:
    assert probe_module.plausible(info, STOP_SIGNALS)


def test_a_signal_outside_the_waited_set_is_not_plausible() -> None:
    assert not probe_module.plausible(FakeSiginfo(si_signo=signal.SIGUSR1), STOP_SIGNALS)


def test_a_real_sigtimedwait_still_returns_a_signal_sent_to_the_thread() -> None:
    """The wrapper over the real call: a signal sent with pthread_kill is taken."""
    waited = {signal.SIGUSR2}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    try:
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR2)
        assert probe_module.wait_for_signal(waited, 5.0) == signal.SIGUSR2
        assert probe_module.wait_for_signal(waited, 0.01) is None
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def test_the_deadline_met_while_the_final_line_is_written_leaves_it_done(reader: CountingReader) -> None:
    """The loop ends at its own clock's deadline and writes the final line while the probe
    thread meets the deadline too: the line says `done`, never `stopping`."""
    out = io.StringIO()
    probe = make_probe(LoopStats(), reader, out)
    take = probe.sample

    def sample_beside_the_probe_thread(*args: Any, **kwargs: Any) -> Sample:
        meets = threading.Thread(target=probe._deadline_reached)
        meets.start()
        meets.join(0.2)  # blocked until the line is written
        return take(*args, **kwargs)

    probe.sample = sample_beside_the_probe_thread  # type: ignore[method-assign]
    probe.finish("done", "reached the deadline")
    final = json.loads(out.getvalue().splitlines()[-1])
    assert (final["state"], final["message"]) == ("done", "reached the deadline")
    assert probe.stats.stop_requested and probe.state == "done"
