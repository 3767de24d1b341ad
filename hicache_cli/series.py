"""A run's samples in bounded memory, whatever its duration.

Every sample of every rank passes through once. Kept are: the exact totals the report
needs (peaks, counts, the last readings), the PP-consistency digests at the rounds ranks
share, and a bounded history per rank: every sample until there are KEPT_MAX, then every
second, fourth... sample (evenly spaced, the first always), and always the latest. A
dropped sample's worst loop latency is folded into the next kept one, so the maximum over
any stretch of the history stays exact. Statistics thin to a few hundred points anyway
(analysis.stats.MAX_POINTS); this is what lets `hicache` watch a day-long run. A rank
file's line becomes a Sample only if the history keeps it (RunFollower: the totals come
from the line's fields), which halves the time to read a long run directory.
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
DIGEST_EVERY = 1024  # ranks checkpoint at multiples of this many event rounds (hicache_model.hiradix_cache)


@dataclass(frozen=True)
class MemoryRead:
    """A sample's reading of smaps_rollup (about once a second), with the RSS beside it."""

    rss_bytes: int | None
    anon_bytes: int | None
    uss_bytes: int | None


@dataclass
class Totals:
    """Exact over every sample of one rank, not only the kept ones."""

    samples: int = 0
    unreadable: int = 0  # complete lines of the rank's file that were not samples (skipped)
    rss_first: int | None = None
    rss_last: int | None = None
    rss_peak: int | None = None
    depth_max: int = 0
    memory_readings: int = 0  # samples with a reading of smaps_rollup
    anon_first: int | None = None
    anon_last: int | None = None
    anon_peak: int | None = None
    last_memory_read: MemoryRead | None = None
    gpu_last: int | None = None
    gpu_peak: int | None = None
    last_works: dict[str, Any] | None = None  # hicache trace: the last Work counts a sample had
    live_max: int = 0  # ... and the most live Works any sample with counts had
    live_last: int = 0  # ... and the last one's (its depth: a follow's is its census's count, no hook's)
    last_sites: list[dict[str, Any]] | None = None
    site_live_max: int = 0  # the most live Works one creation site held, in any sample's sites

    def add(self, f: Mapping[str, Any]) -> None:
        """One sample, as its fields (`Sample.as_dict()`, or a decoded line's)."""
        self.samples += 1
        rss, depth, anon, uss = f["rss_bytes"], f["depth"], f["anon_bytes"], f["uss_bytes"]
        if rss is not None:
            if self.rss_first is None:
                self.rss_first = rss
            self.rss_last = rss
            self.rss_peak = rss if self.rss_peak is None else max(self.rss_peak, rss)
        self.depth_max = max(self.depth_max, depth)
        if anon is not None or uss is not None:
            self.memory_readings += 1
            self.last_memory_read = MemoryRead(rss, anon, uss)
            if anon is not None:
                if self.anon_first is None:
                    self.anon_first = anon
                self.anon_last = anon
                self.anon_peak = anon if self.anon_peak is None else max(self.anon_peak, anon)
        if (gpu := f["gpu_bytes"]) is not None:
            self.gpu_last = gpu
            self.gpu_peak = gpu if self.gpu_peak is None else max(self.gpu_peak, gpu)
        if (works := f["works"]) is not None:
            self.live_max = depth if self.last_works is None else max(self.live_max, depth)
            self.live_last = depth
            self.last_works = works
        if (sites := f["sites"]) is not None:
            self.last_sites = sites
            for site in sites:
                live_max = site.get("live_max")
                if type(live_max) is int:  # a site a foreign tracer mangled counts for nothing (as in read_sites)
                    self.site_live_max = max(self.site_live_max, live_max)


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
        self._latest_pending = False  # kept[-1] is the latest, not yet settled as history or dropped
        self._latest_off_grid = False  # ... and only there as the latest: replaced by the next
        # worst latency of the samples dropped since the last one kept in the history (the
        # latest excepted): folded into the latest when it stays
        self.carry_max: float | None = None

    def add(self, sample: Sample) -> None:
        self.add_fields(sample.as_dict(), sample)

    def add_fields(self, fields: dict[str, Any], sample: Sample | None = None, *, latest: bool = True) -> None:
        """One sample as its fields; `sample`, when the caller has it built. `latest=False`:
        another sample of this rank follows at once, so one off the history's grid is
        dropped here without being built (a reader catching up builds ~1 sample in stride)."""
        index = self.totals.samples
        self.totals.add(fields)
        kept = self.kept
        hist = fields["lat_hist"]
        if not self.hist_marks or hist is not self.hist_marks[-1][1]:
            self._mark(fields["t"], hist)
        if self._latest_pending:  # the previous latest: dropped, or kept as history
            self._latest_pending = False
            if self._latest_off_grid:
                self.carry_max = _worst(self.carry_max, kept.pop().lat_max_ms)
            else:  # it stays, as history: it takes the dropped samples' worst latency
                kept[-1] = self._demoted(kept[-1])
        on_grid = index % self._stride == 0
        if not on_grid and not latest:
            self.carry_max = _worst(self.carry_max, fields["lat_max_ms"])
            return
        kept.append(sample if sample is not None else Sample(**fields))
        self._latest_pending, self._latest_off_grid = True, not on_grid
        if on_grid and len(kept) > self.kept_max:
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

    def _mark(self, t: float, hist: dict[str, int]) -> None:
        if self.hist_marks and hist == self.hist_marks[-1][1]:
            return  # the same histogram (a whole line repeats it)
        marks = self.hist_marks
        marks.append((t, hist))
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
        self.add_fields(rank, sample.as_dict(), sample)

    def add_fields(
        self, rank: int, fields: dict[str, Any], sample: Sample | None = None, *, latest: bool = True
    ) -> None:
        """As RankSeries.add_fields, and the digests the sample carries."""
        self.rank(rank).add_fields(fields, sample, latest=latest)
        if digests := fields["digests"]:
            self.digests.add(rank, digests, len(self.ranks))

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
    in bounded memory (RunSeries). Lines that are not samples are skipped, and counted
    (each rank's `totals.unreadable`)."""

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
        pending: tuple[int, dict[str, Any]] | None = None  # a line's fields, until the next line shows
        for rank, line in self._tail.lines(max_bytes):  # whether another of its rank follows at once
            decoder = decoders.get(rank) or decoders.setdefault(rank, LineDecoder())
            fields = decoder.fields(line)
            if fields is None:
                run.rank(rank).totals.unreadable += 1
                continue
            if pending is not None:
                run.add_fields(pending[0], pending[1], latest=pending[0] != rank)
            pending = (rank, fields)
        if pending is not None:
            run.add_fields(*pending)
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
