"""The one data contract between a rank's probe, the dashboard and the report.

Each rank appends one JSON object per line to `rank-<N>.jsonl` in the run directory.
Lines have a `kind`: "sample" (periodic), or "final" (the last line a rank writes, with
how it stopped). A reading that could not be taken is None, never an exception.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hicache_cli.protocol import SAMPLES_GLOB


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the rank's workload started (negative while starting)
    wall: float  # time.time() when taken
    rank: int
    pp_rank: int
    tp_rank: int
    pid: int
    state: str  # "starting" | "running" | "stopping" | "done" | "error"
    rss_bytes: int | None
    depth: int  # outstanding Works in the work list
    held_bytes: int  # payload bytes kept alive by those Works
    rounds: int
    lat_p50_ms: float | None  # loop latency over the rounds since the previous sample
    lat_p99_ms: float | None
    lat_max_ms: float | None
    lat_count: int  # rounds those latencies cover
    round_age_s: float  # time since the current round began
    sent: int  # PP-sync messages sent downstream
    received: int  # PP-sync messages received from upstream
    blocked_on: str | None = None  # while blocked, e.g. "PP sync, waiting in recv from pp rank 0"
    blocked_peer: int | None = None  # the pp rank it is blocked on, when it knows
    counters: dict[str, float] = field(default_factory=dict)
    # Cumulative loop-latency histogram since the start: {bucket: rounds}, sparse;
    # see hicache_cli.analysis.histogram for the bucket scale.
    lat_hist: dict[str, int] = field(default_factory=dict)
    # PP consistency: {event round: digest of the counts applied up to it}, new ones only
    digests: dict[str, int] = field(default_factory=dict)
    gpu_bytes: int | None = None  # torch.cuda.memory_allocated on the rank's GPU; None on CPU
    # what RSS is made of (smaps_rollup), read about once a second and in the final line; None between
    anon_bytes: int | None = None  # anonymous memory
    uss_bytes: int | None = None  # unique set size
    device_name: str | None = None  # "cpu" or the GPU model
    # hicache trace: the process's Works (created, waited, completed, dropped, live), and
    # (at most once a second, and in the final line) the top creation sites
    works: dict[str, int] | None = None
    sites: list[dict[str, Any]] | None = None
    node: int = 0  # the --node-rank of the hicache that launched the rank (0 on one machine)
    host: str | None = None  # the rank's host name
    kind: str = "sample"
    message: str | None = None  # final lines: how the rank stopped
    signal: str | None = None  # final lines: the signal that stopped it (e.g. "SIGTERM"), if one did

    def to_json(self) -> str:
        # vars, not asdict: asdict deep-copies every nested dict, and this runs in every
        # rank ten times a second, next to the loop being measured
        return json.dumps(vars(self), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class LineTail:
    """New complete lines of the rank files of a run directory, as they grow.

    A line a rank is still writing (or that a killed rank left torn) waits for its newline.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._offsets: dict[Path, int] = {}

    def poll(self) -> dict[int, list[bytes]]:
        new: dict[int, list[bytes]] = {}
        for path in sorted(self.run_dir.glob(SAMPLES_GLOB)):
            rank = int(path.stem.split("-", 1)[1])
            offset = self._offsets.get(path, 0)
            with path.open("rb") as fh:
                fh.seek(offset)
                data = fh.read()
            end = data.rfind(b"\n") + 1
            self._offsets[path] = offset + end
            new[rank] = data[:end].splitlines()
        return new


class RunFollower:
    """The samples of a run directory's rank files, read incrementally as they grow.
    Lines that are not samples are skipped."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.samples: dict[int, list[Sample]] = {}
        self._tail = LineTail(run_dir)

    def poll(self) -> dict[int, list[Sample]]:
        for rank, lines in self._tail.poll().items():
            parsed = self.samples.setdefault(rank, [])
            for line in lines:
                try:
                    data = json.loads(line)
                    if isinstance(data, dict):
                        parsed.append(Sample.from_dict(data))
                except (json.JSONDecodeError, TypeError, UnicodeDecodeError):
                    continue
        return self.samples


def read_run(run_dir: Path) -> dict[int, list[Sample]]:
    """Samples of every rank that wrote a file, by rank."""
    return RunFollower(run_dir).poll()
