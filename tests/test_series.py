"""series: a run's samples in bounded memory (history, exact totals, digests), and the
compact lines of format 2 (sample.LineEncoder / LineDecoder) that feed it."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from hicache_cli.analysis import stats
from hicache_cli.analysis.assess import resolve_warmup
from hicache_cli.config import StressConfig
from hicache_cli.outcome import RunOutcome
from hicache_cli.protocol import samples_file
from hicache_cli.sample import EVENT_FIELDS, KEYFRAME_S, LineEncoder, LineTail, Sample, decode_lines
from hicache_cli.series import DigestCheck, RankSeries, RunFollower, RunSeries, Totals
from tests.conftest import build_sample, build_series, report_json


def noisy_series(n: int, seed: int = 3) -> list[Sample]:
    rng = random.Random(seed)
    return [
        build_sample(
            0,
            t=float(i),
            rss_bytes=rng.randrange(10**8, 2 * 10**8),
            depth=rng.randrange(100),
            lat_max_ms=rng.choice([None, rng.uniform(0.0, 50.0)]),
            anon_bytes=rng.choice([None, rng.randrange(10**8)]),
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("n", [1, 15, 16, 17, 100, 1000, 4099])
def test_the_history_is_bounded_evenly_spaced_and_ends_at_the_latest(n: int) -> None:
    series = RankSeries(kept_max=16)
    samples = noisy_series(n)
    for sample in samples:
        series.add(sample)
        assert series.kept[-1].t == sample.t  # the latest is always there
        assert series.kept[0].t == 0.0  # and the first
        assert len(series.kept) <= 16 + 1
    gaps = [b.t - a.t for a, b in zip(series.kept, series.kept[1:], strict=False)]
    assert len(set(gaps[:-1])) <= 1  # one stride apart, but for the latest
    assert not gaps or gaps[-1] <= gaps[0]
    assert n <= 17 or len(series.kept) >= 8  # never thinned below half


def test_a_dropped_samples_worst_latency_moves_to_the_next_kept_one() -> None:
    series = RankSeries(kept_max=16)
    samples = noisy_series(1000)
    for sample in samples:
        series.add(sample)
    previous = -1.0
    for kept in series.kept:  # each kept sample's max covers every sample since the one before it
        covered = [s.lat_max_ms for s in samples if previous < s.t <= kept.t and s.lat_max_ms is not None]
        worst = kept.lat_max_ms
        if kept is series.kept[-1] and series.carry_max is not None:  # the latest: with what was dropped before it
            worst = series.carry_max if worst is None else max(worst, series.carry_max)
        assert worst == (max(covered) if covered else None)
        previous = kept.t


def test_totals_are_exact_over_every_sample_not_only_the_kept_ones() -> None:
    samples = noisy_series(3000)
    series = RankSeries(kept_max=16)
    for sample in samples:
        series.add(sample)
    whole = Totals()
    for sample in samples:
        whole.add(sample.as_dict())
    assert series.totals == whole
    assert series.totals.samples == 3000
    assert series.totals.rss_peak == max(s.rss_bytes for s in samples)
    assert series.totals.depth_max == max(s.depth for s in samples)
    assert series.totals.anon_peak == max(s.anon_bytes for s in samples if s.anon_bytes is not None)


def test_a_report_from_a_thinned_history_keeps_exact_peaks_and_counts() -> None:
    whole = {r: build_series(r, n=3000, rss_per_s=1000.0, depth_per_s=0.0) for r in (0, 1)}
    thinned = RunSeries(kept_max=64)
    for rank, series in whole.items():
        for sample in series:
            thinned.add(rank, sample)
    config = StressConfig(pp=2, duration_s=300.0)
    full, small = report_json(config, whole, RunOutcome()), report_json(config, thinned, RunOutcome())
    for a, b in zip(full["ranks"], small["ranks"], strict=True):
        assert (a["samples"], a["rss"]["peak_bytes"], a["work_list"]["max"]) == (
            b["samples"],
            b["rss"]["peak_bytes"],
            b["work_list"]["max"],
        )
        assert a["verdict"] == b["verdict"] == "BOUNDED"
        assert a["rss"]["slope_mb_per_h"] == pytest.approx(b["rss"]["slope_mb_per_h"], rel=0.05)
        assert a["loop_latency_ms"]["max"] == b["loop_latency_ms"]["max"]


def test_digests_are_compared_in_bounded_memory_and_a_divergence_still_shows() -> None:
    check = DigestCheck(rounds_max=8)
    for rank in (0, 1):  # rank 0's whole file first, as a report reads them
        for k in range(1, 201):
            digest = k if rank == 0 or k < 150 else -k  # rank 1 diverges at checkpoint 150
            check.add(rank, {str(k * 1024): digest})
    assert len(check.by_round) <= 9
    summary = check.summary()
    assert not summary["consistent"]
    diverged = summary["first_divergence"]["round"] // 1024
    assert 150 <= diverged <= 150 + 32  # at the next checkpoint kept
    assert summary["checked_rounds"] > 0


def test_an_agreeing_run_is_consistent_whatever_its_length() -> None:
    check = DigestCheck(rounds_max=8)
    for k in range(1, 500):
        for rank in (0, 1, 2):
            check.add(rank, {str(k * 1024): k * 7})
    summary = check.summary()
    assert summary["consistent"] and summary["checked_rounds"] >= 8


def changing_samples(n: int, hz: float = 10.0) -> list[Sample]:
    """A rank's samples where some fields change every time, some now and then, some never."""
    out = []
    for i in range(n):
        t = round(i / hz, 4)
        out.append(
            build_sample(
                2,
                t=t,
                rounds=i * 10,
                depth=i % 3,
                rss_bytes=100_000_000 + 4096 * (i // 7),
                blocked_on="recv from pp rank 1" if i % 4 == 0 else None,
                counters={"waits": float(i)},
                lat_hist={"-60": i + 1},
                lat_p50_ms=0.5 if i % 5 else None,
                lat_count=0 if i % 5 == 0 else 10,
                anon_bytes=90_000_000 if i % 10 == 0 else None,
                digests={str(1024 * i): i} if i % 9 == 0 else {},
                kind="final" if i == n - 1 else "sample",
                message="done" if i == n - 1 else None,
            )
        )
    return out


def encode_all(samples: list[Sample], hz: float = 10.0) -> list[str]:
    encoder = LineEncoder()
    return [encoder.encode(s, now=i / hz) for i, s in enumerate(samples)]


def test_compact_lines_read_back_as_the_samples_written() -> None:
    samples = changing_samples(400)
    decoded = decode_lines(encode_all(samples))
    assert len(decoded) == len(samples)
    throttled = ("lat_hist", "counters")
    for got, sent in zip(decoded, samples, strict=True):
        assert {k: v for k, v in got.as_dict().items() if k not in throttled} == {
            k: v for k, v in sent.as_dict().items() if k not in throttled
        }
        # the histogram and the counters are at most a second old
        assert sent.counters["waits"] - 10 <= got.counters["waits"] <= sent.counters["waits"]
        assert got.lat_hist == {"-60": int(got.counters["waits"]) + 1}
    assert decoded[-1] == samples[-1]  # the final line is whole


def test_a_line_leaves_out_what_the_reader_already_has() -> None:
    samples = changing_samples(200)
    lines = encode_all(samples)
    whole = [s.to_json() for s in samples]
    assert sum(map(len, lines)) < sum(map(len, whole)) / 3
    keyframes = [i for i, line in enumerate(lines) if '"rank"' in line]
    assert keyframes == [0, 100, 199]  # the first, every KEYFRAME_S (10 s at 10 Hz), the final
    assert KEYFRAME_S == 10.0
    for i, line in enumerate(lines):
        data = json.loads(line)
        assert "t" in data and "wall" in data
        if i not in keyframes:  # an empty event is left out
            assert all(data[k] != v for k, v in EVENT_FIELDS.items() if k in data)


def test_a_reader_may_start_at_any_keyframe() -> None:
    samples = changing_samples(250)
    lines = encode_all(samples)
    from_keyframe = decode_lines(lines[100:])
    assert from_keyframe == decode_lines(lines)[100:]


def test_whole_lines_of_format_1_read_as_before() -> None:
    samples = changing_samples(30)
    assert decode_lines([s.to_json() for s in samples]) == samples


def test_a_file_is_read_a_chunk_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LineTail, "CHUNK", 37)  # lines straddle every chunk
    samples = changing_samples(120)
    samples_file(tmp_path, 2).write_text("\n".join(encode_all(samples)) + "\n")
    follower = RunFollower(tmp_path)
    follower.poll()
    got = follower.run.ranks[2]
    assert got.totals.samples == 120
    assert [s.t for s in got.kept] == [s.t for s in samples]


def test_a_line_longer_than_any_sample_is_skipped_without_gathering_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file someone else wrote: one huge line, growing with no newline, between samples. It
    is counted unreadable and skipped to its end, its bytes looked at once (never joined
    again with each chunk, which was quadratic: 87 s for 300 MB), never held in memory."""
    monkeypatch.setattr(LineTail, "CHUNK", 64)
    monkeypatch.setattr(LineTail, "MAX_LINE", 1000)
    samples = changing_samples(3)
    path = samples_file(tmp_path, 0)
    path.write_text(samples[0].to_json() + "\n" + "x" * 5000)  # no newline yet
    follower = RunFollower(tmp_path)
    follower.poll()
    assert follower.run.ranks[0].totals.samples == 1
    assert follower.backlog() == 0  # read past and dropped, not kept waiting for its newline
    with path.open("a") as fh:
        fh.write("y" * 5000 + "\n" + samples[1].to_json() + "\n" + samples[2].to_json() + "\n")
    follower.poll()
    totals = follower.run.ranks[0].totals
    assert (totals.samples, totals.unreadable) == (3, 1)
    assert [s.t for s in follower.run.ranks[0].kept] == [s.t for s in samples]


def test_catching_up_reads_a_share_of_each_file_a_poll(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`watch` on a long run: a bounded read per refresh, every rank advancing, each line once."""
    monkeypatch.setattr(LineTail, "CHUNK", 64)
    for rank in (0, 1):
        lines = encode_all([replace(s, rank=rank) for s in changing_samples(200)])
        samples_file(tmp_path, rank).write_text("\n".join(lines) + "\n")
    follower = RunFollower(tmp_path)
    assert follower.backlog() == sum(samples_file(tmp_path, r).stat().st_size for r in (0, 1))
    counts = []
    while True:
        follower.poll(max_bytes=2_000)
        counts.append([follower.run.ranks[r].totals.samples for r in (0, 1)])
        if follower.caught_up:
            break
    assert len(counts) > 3 and all(0 < a < 200 and 0 < b < 200 for a, b in counts[:2])  # both ranks advance
    assert counts[-1] == [200, 200] and follower.backlog() == 0
    assert [s.t for s in follower.run.ranks[1].kept] == [s.t for s in changing_samples(200)]
    with samples_file(tmp_path, 1).open("a") as fh:
        fh.write(replace(changing_samples(201)[-1], rank=1).to_json() + "\n")
    follower.poll(max_bytes=2_000)
    assert follower.caught_up and follower.run.ranks[1].totals.samples == 201


@pytest.mark.parametrize("max_bytes", [None, 3_000, 700], ids=["one-read", "pieces", "small-pieces"])
def test_a_follower_keeps_what_adding_every_sample_keeps(tmp_path: Path, max_bytes: int | None) -> None:
    """Reading files, most samples are dropped unbuilt (another line of the rank follows);
    the history, totals, folded latencies and histogram marks are those of adding each
    sample in turn, however the reads fall."""
    runs = {}
    for rank in (0, 1):
        samples = [replace(s, rank=rank, lat_hist={"-60": i // 10}) for i, s in enumerate(noisy_series(700, rank))]
        samples_file(tmp_path, rank).write_text("".join(s.to_json() + "\n" for s in samples))
        one_by_one = RankSeries(kept_max=40, marks_max=8)
        for sample in samples:
            one_by_one.add(sample)
        runs[rank] = one_by_one
    follower = RunFollower(tmp_path, kept_max=40)
    follower.run.marks_max = 8
    follower.poll(max_bytes)
    while not follower.caught_up:
        follower.poll(max_bytes)
    for rank, expected in runs.items():
        got = follower.run.ranks[rank]
        assert got.kept == expected.kept and len(got.kept) <= 41
        assert got.totals == expected.totals and got.totals.samples == 700
        assert got.carry_max == expected.carry_max
        assert got.hist_marks == expected.hist_marks


def test_following_a_long_rank_file_keeps_the_history_bounded(tmp_path: Path) -> None:
    """Six hours of one rank at 1 Hz, a leak of 1 MB/h under noise of a few pages."""
    rss_per_s = 1e6 / 3600
    rng = random.Random(5)
    samples = [
        build_sample(0, t=float(i), rss_bytes=int(1e8 + rss_per_s * i) + 4096 * rng.randrange(8), lat_max_ms=1.0)
        for i in range(6 * 3600)
    ]
    samples_file(tmp_path, 0).write_text("\n".join(encode_all(samples, hz=1.0)) + "\n")
    run = RunFollower(tmp_path)
    run.poll()
    series = run.run.ranks[0]
    assert series.totals.samples == 6 * 3600
    assert len(series.kept) <= series.kept_max + 1
    trend = stats.theil_sen(stats.thin([(s.t, float(s.rss_bytes)) for s in series.kept]))
    assert trend is not None and stats.per_hour_mb(trend.slope) == pytest.approx(1.0, rel=0.01)


def test_the_warm_up_is_found_in_a_thinned_or_slowly_sampled_history() -> None:
    def with_transient(hz: float, seconds: float) -> list[Sample]:
        out = []
        for i in range(int(seconds * hz)):
            t = i / hz
            rss = 1e8 + (5e7 * t / 30.0 if t < 30.0 else 5e7)  # climbs for 30 s, then flat
            out.append(build_sample(0, t=t, rss_bytes=int(rss)))
        return out

    slow = with_transient(1.0, 600.0)  # --probe-hz 1
    thinned = RankSeries(kept_max=512)
    for sample in with_transient(10.0, 3600.0):
        thinned.add(sample)
    for series in (slow, thinned.kept):
        warmup = resolve_warmup(series, None, 100.0)
        assert 29.0 <= warmup <= 45.0, warmup


def test_only_the_latest_sample_holds_the_histogram_and_marks_are_bounded() -> None:
    series = RankSeries(kept_max=32, marks_max=16)
    for sample in build_series(0, n=2000):  # a new histogram in every sample
        series.add(sample)
    assert series.kept[-1].lat_hist  # the latest has it
    assert all(not s.lat_hist and not s.counters for s in series.kept[:-1])
    assert len(series.hist_marks) <= 17
    assert series.hist_marks[0][0] == series.kept[0].t  # the first is always kept
    times = [t for t, _ in series.hist_marks]
    assert times == sorted(times)
    t = series.kept[len(series.kept) // 2].t
    mark_t, hist = next(m for m in reversed(series.hist_marks) if m[0] <= t)
    assert series.histogram_before(t) is hist and mark_t <= t
    assert series.histogram_before(-1.0) == {}


def test_a_thinned_reports_latency_window_matches_the_whole_one() -> None:
    def latency(t: float) -> float:
        return 0.050 if t < 5.0 else 0.002  # a slow warm-up, then 2 ms rounds

    whole = {0: build_series(0, n=3000, latency_s=latency), 1: build_series(1, n=3000, latency_s=latency)}
    thinned = RunSeries()
    for rank, series in whole.items():
        for sample in series:
            thinned.add(rank, sample)
    config = StressConfig(pp=2, duration_s=300.0, warmup_s=10.0)
    full, small = report_json(config, whole, RunOutcome()), report_json(config, thinned, RunOutcome())
    for a, b in zip(full["ranks"], small["ranks"], strict=True):
        assert a["loop_latency_ms"]["p99"] == b["loop_latency_ms"]["p99"] < 5.0  # the warm-up's 50 ms left out
        assert b["loop_latency_ms"]["rounds_measured"] >= 0.95 * a["loop_latency_ms"]["rounds_measured"]


def test_in_a_live_run_a_round_every_rank_reached_leaves_the_table() -> None:
    run = RunSeries()
    for k in range(1, 300):  # as a follower sees them: each rank's newest lines, poll after poll
        for rank in (0, 1):
            run.add(rank, build_sample(rank, t=float(k), digests={str(k * 1024): k}))
    assert len(run.digests.by_round) == 0
    assert run.digests.summary()["checked_rounds"] == 299
    assert run.digests.summary()["consistent"]


def test_lines_that_are_not_samples_are_counted_and_said_with_the_verdict(tmp_path: Path) -> None:
    """A line torn in the middle of a file (a full disk), another program's line, a line of
    the wrong shape: each is skipped, the lines after it read as before, and the rank's
    report says how many lines its verdict did not see."""
    lines = encode_all([replace(s, rank=0) for s in changing_samples(60)])
    lines[20] = lines[20][: len(lines[20]) // 2]
    lines.insert(30, "hello from another program")
    lines.insert(40, '{"t": "soon"}')
    samples_file(tmp_path, 0).write_text("".join(line + "\n" for line in lines))
    whole = [replace(s, rank=1) for s in changing_samples(60)]
    samples_file(tmp_path, 1).write_text("".join(s.to_json() + "\n" for s in whole))
    follower = RunFollower(tmp_path)
    follower.poll()
    rank0, rank1 = follower.run.ranks[0].totals, follower.run.ranks[1].totals
    assert (rank0.samples, rank0.unreadable) == (59, 3)
    assert (rank1.samples, rank1.unreadable) == (60, 0)
    assert follower.run.ranks[0].kept[-1] == replace(changing_samples(60)[-1], rank=0)
    ranks = report_json(StressConfig(pp=2, duration_s=6.0), follower.run, RunOutcome())["ranks"]
    assert ranks[0]["unreadable_lines"] == 3
    assert ranks[0]["verdict_reason"].endswith("; 3 lines of its file not samples (skipped)")
    assert ranks[1]["unreadable_lines"] == 0 and "skipped" not in ranks[1]["verdict_reason"]


def test_a_rank_that_wrote_only_lines_that_are_not_samples_says_so(tmp_path: Path) -> None:
    samples_file(tmp_path, 0).write_text("not json\n")
    samples_file(tmp_path, 1).write_text("".join(s.to_json() + "\n" for s in changing_samples(20)))
    follower = RunFollower(tmp_path)
    follower.poll()
    rank0 = report_json(StressConfig(pp=2, duration_s=2.0), follower.run, RunOutcome())["ranks"][0]
    assert rank0["samples"] == 0 and rank0["unreadable_lines"] == 1
    assert rank0["verdict_reason"] == "the rank wrote no samples; 1 line of its file not a sample (skipped)"
