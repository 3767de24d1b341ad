"""A run's samples in bounded memory, whatever its duration.

Every sample of every rank passes through once. Kept are: the exact totals the report
needs (peaks, counts, the last readings), the PP-consistency digests at the rounds ranks
share, and a bounded history per rank: every sample until there are KEPT_MAX, then every
second, fourth... sample (evenly spaced, the first always), and always the latest. A
dropped sample's worst loop latency is folded into the next kept one, so the maximum over
any stretch of the history stays exact. Statistics thin to a few hundred points anyway
(analysis.stats.MAX_POINTS); this is what lets `hicache` watch a day-long run.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hicache_cli.protocol import sample_files
from hicache_cli.sample import LineDecoder, LineTail, Sample

KEPT_MAX = 600  # samples of history per rank: the first minute at 10 Hz, then half as many, evenly spaced
HIST_MARKS_MAX = 60  # latency histograms kept per rank: one a second for the first minute, then thinned alike
DIGEST_ROUNDS_MAX = 4096  # PP-consistency checkpoints waiting for another rank
DIGEST_EVERY = 1024  # ranks checkpoint at multiples of this many event rounds (cache.hiradix_cache)


@dataclass
class Totals:
    """Exact over every sample of one rank, not only the kept ones."""

    samples: int = 0
    rss_first: int | None = None
    rss_last: int | None = None
    rss_peak: int | None = None
    depth_max: int = 0
    memory_readings: int = 0  # samples with a reading of smaps_rollup
    anon_first: int | None = None
    anon_last: int | None = None
    anon_peak: int | None = None
    last_memory_read: Sample | None = None
    gpu_last: int | None = None
    gpu_peak: int | None = None
    last_counted: Sample | None = None  # hicache trace: the last sample with Work counts
    live_max: int = 0  # ... and the most live Works any of them had
    last_sites: list[dict[str, Any]] | None = None
    site_live_max: int = 0  # the most live Works one creation site held, in any sample's sites

    def add(self, s: Sample) -> None:
        self.samples += 1
        if s.rss_bytes is not None:
            if self.rss_first is None:
                self.rss_first = s.rss_bytes
            self.rss_last = s.rss_bytes
            self.rss_peak = s.rss_bytes if self.rss_peak is None else max(self.rss_peak, s.rss_bytes)
        self.depth_max = max(self.depth_max, s.depth)
        if s.anon_bytes is not None or s.uss_bytes is not None:
            self.memory_readings += 1
            self.last_memory_read = s
            if s.anon_bytes is not None:
                if self.anon_first is None:
                    self.anon_first = s.anon_bytes
                self.anon_last = s.anon_bytes
                self.anon_peak = s.anon_bytes if self.anon_peak is None else max(self.anon_peak, s.anon_bytes)
        if s.gpu_bytes is not None:
            self.gpu_last = s.gpu_bytes
            self.gpu_peak = s.gpu_bytes if self.gpu_peak is None else max(self.gpu_peak, s.gpu_bytes)
        if s.works is not None:
            self.live_max = s.depth if self.last_counted is None else max(self.live_max, s.depth)
            self.last_counted = s
        if s.sites is not None:
            self.last_sites = s.sites
            for site in s.sites:
                self.site_live_max = max(self.site_live_max, int(site.get("live_max", 0)))


class RankSeries:
    """One rank's bounded history (`kept`, oldest first, the latest last) and its totals.

    Only the latest sample keeps its cumulative latency histogram and counters (the largest
    fields, ~5 kB in memory); the histograms, each time the rank refreshed it, go to
    `hist_marks` (time, histogram), thinned like the history, for latency windows."""

    def __init__(self, kept_max: int = KEPT_MAX, marks_max: int = HIST_MARKS_MAX) -> None:
        self.kept: list[Sample] = []
        self.totals = Totals()
        self.kept_max = max(4, kept_max)
        self.marks_max = max(4, marks_max)
        self.hist_marks: list[tuple[float, dict[str, int]]] = []
        self._stride = 1  # the history keeps every stride-th sample
        self._latest_off_grid = False  # kept[-1] is only there as the latest: replaced by the next
        # worst latency of the samples dropped since the last one kept in the history (the
        # latest excepted): folded into the latest when it stays
        self.carry_max: float | None = None

    def add(self, sample: Sample) -> None:
        index = self.totals.samples
        self.totals.add(sample)
        kept = self.kept
        if not self.hist_marks or sample.lat_hist is not self.hist_marks[-1][1]:
            self._mark(sample)
        if self._latest_off_grid:
            self.carry_max = _worst(self.carry_max, kept.pop().lat_max_ms)
        elif kept:  # the latest stays, as history: it takes the dropped samples' worst latency
            kept[-1] = self._demoted(kept[-1])
        kept.append(sample)
        self._latest_off_grid = index % self._stride != 0
        if not self._latest_off_grid and len(kept) > self.kept_max:
            self._halve()

    def _halve(self) -> None:
        """Keep every other sample of the history, the first always; fold the rest forward."""
        kept, halved = self.kept, [self.kept[0]]
        for i in range(2, len(kept), 2):
            dropped, sample = kept[i - 1], kept[i]
            worst = _worst(dropped.lat_max_ms, sample.lat_max_ms)
            halved.append(sample if worst == sample.lat_max_ms else replace(sample, lat_max_ms=worst))
        if len(kept) % 2 == 0:  # the last one is off the new grid: the latest stays, as such
            halved.append(kept[-1])
            self._latest_off_grid = True
        self.kept[:] = halved
        self._stride *= 2

    def _mark(self, sample: Sample) -> None:
        if self.hist_marks and sample.lat_hist == self.hist_marks[-1][1]:
            return  # the same histogram (a whole line repeats it)
        marks = self.hist_marks
        marks.append((sample.t, sample.lat_hist))
        if len(marks) > self.marks_max:
            marks[:] = marks[:1] + marks[2::2] if len(marks) % 2 else marks[:1] + marks[2::2] + marks[-1:]

    def histogram_before(self, t: float) -> dict[str, int]:
        """The latest histogram taken at or before `t` ({} if none)."""
        i = bisect.bisect_right(self.hist_marks, t, key=lambda mark: mark[0])
        return self.hist_marks[i - 1][1] if i else {}

    def _demoted(self, sample: Sample) -> Sample:
        """A sample that stays in the history: without the histogram and counters, with the
        worst latency of the samples dropped just before it."""
        worst, self.carry_max = _worst(sample.lat_max_ms, self.carry_max), None
        if worst == sample.lat_max_ms and not sample.lat_hist and not sample.counters:
            return sample
        return replace(sample, lat_hist={}, counters={}, lat_max_ms=worst)


def _worst(a: float | None, b: float | None) -> float | None:
    """The larger latency of two, either of which may be missing."""
    return b if a is None else a if b is None else max(a, b)


class DigestCheck:
    """Did every rank apply the same counts in the same rounds? Ranks checkpoint a digest
    every 1024 event rounds; digests are compared at the rounds two or more ranks reached,
    as they arrive. Rounds wait for another rank in a bounded table: when it is full, only
    every other checkpoint round is kept from then on (a digest covers every round before
    it, so a divergence still shows, at the next round kept)."""

    def __init__(self, rounds_max: int = DIGEST_ROUNDS_MAX) -> None:
        self.rounds_max = rounds_max
        self.by_round: dict[int, dict[int, int]] = {}
        self.checked = 0
        self.last_checked: int | None = None
        self.first_divergence: tuple[int, dict[int, int]] | None = None
        self._stride = 1  # rounds kept are multiples of this many checkpoints

    def add(self, rank: int, digests: Mapping[str, int], ranks: int = 0) -> None:
        """`ranks`: how many ranks the run has, when known: a round all of them reached is
        done with and leaves the table (in a live run the table stays a few rounds long)."""
        for key, digest in digests.items():
            round_ = int(key)
            if self._stride > 1 and (round_ // DIGEST_EVERY) % self._stride:
                continue
            seen = self.by_round.setdefault(round_, {})
            seen[rank] = digest
            if len(seen) == 2:
                self.checked += 1
                self.last_checked = max(round_, self.last_checked or round_)
            if len(seen) > 1 and len(set(seen.values())) > 1:
                if self.first_divergence is None or round_ < self.first_divergence[0]:
                    self.first_divergence = (round_, seen)
            if ranks > 1 and len(seen) >= ranks:
                del self.by_round[round_]
            if len(self.by_round) > self.rounds_max:
                self._stride *= 2
                self.by_round = {r: d for r, d in self.by_round.items() if (r // DIGEST_EVERY) % self._stride == 0}

    def summary(self) -> dict[str, Any]:
        first = self.first_divergence
        return {
            "checked_rounds": self.checked,
            "last_checked_round": self.last_checked,
            "consistent": first is None,
            "first_divergence": None
            if first is None
            else {"round": first[0], "digests": {str(k): v for k, v in sorted(first[1].items())}},
        }


class RunSeries:
    """Every rank's bounded history, totals and the run's digest check."""

    def __init__(self, kept_max: int = KEPT_MAX, marks_max: int = HIST_MARKS_MAX) -> None:
        self.kept_max, self.marks_max = kept_max, marks_max
        self.ranks: dict[int, RankSeries] = {}
        self.samples: dict[int, list[Sample]] = {}  # rank -> its kept history (the same lists)
        self.digests = DigestCheck()

    def rank(self, rank: int) -> RankSeries:
        series = self.ranks.get(rank)
        if series is None:
            series = self.ranks[rank] = RankSeries(self.kept_max, self.marks_max)
            self.samples[rank] = series.kept
        return series

    def add(self, rank: int, sample: Sample) -> None:
        self.rank(rank).add(sample)
        if sample.digests:
            self.digests.add(rank, sample.digests, len(self.ranks))

    @classmethod
    def of(cls, samples: Mapping[int, list[Sample]]) -> RunSeries:
        """From whole series (tests, a report rebuilt from samples in memory)."""
        longest = max([KEPT_MAX, *(len(s) for s in samples.values())])
        run = cls(kept_max=longest, marks_max=longest)
        for rank in samples:
            run.rank(rank)
        for rank, series in samples.items():
            for sample in series:
                run.add(rank, sample)
        return run


class RunFollower:
    """The samples of a run directory's rank files, read incrementally as they grow, kept
    in bounded memory (RunSeries). Lines that are not samples are skipped."""

    def __init__(self, run_dir: Path, kept_max: int = KEPT_MAX) -> None:
        self.run_dir = run_dir
        self.run = RunSeries(kept_max)
        self._tail = LineTail(run_dir)
        self._decoders: dict[int, LineDecoder] = {}

    @property
    def samples(self) -> dict[int, list[Sample]]:
        return self.run.samples

    def poll(self, max_bytes: int | None = None) -> dict[int, list[Sample]]:
        """Every rank's kept history, with what was written since the last call (with
        `max_bytes`, about that much of it: see `caught_up`)."""
        run, decoders = self.run, self._decoders
        for rank in sample_files(self.run_dir):
            run.rank(rank)
        for rank, line in self._tail.lines(max_bytes):
            decoder = decoders.get(rank) or decoders.setdefault(rank, LineDecoder())
            sample = decoder.decode(line)
            if sample is not None:
                run.add(rank, sample)
        return run.samples

    @property
    def caught_up(self) -> bool:
        """Whether the last poll read every rank file to its end."""
        return self._tail.caught_up

    def backlog(self) -> int:
        """Bytes of the rank files not read yet."""
        return self._tail.backlog()


def load_run(run_dir: Path) -> RunSeries:
    """Every rank's bounded history and totals, and the digest check, read to the end."""
    follower = RunFollower(run_dir)
    follower.poll()
    return follower.run


def read_run(run_dir: Path) -> dict[int, list[Sample]]:
    """Every rank's samples (its bounded history), by rank."""
    return load_run(run_dir).samples
