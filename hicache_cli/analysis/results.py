"""The report as typed records: what analysis builds, what every reader reads, what
`hicache_cli.run()` returns and `load_report()` reads back (docs/report.md, docs/api.md).

Each record's fields are its JSON keys in the order they are written (`records.Record`):
`to_dict()` is the one serializer of a report and `Report.from_dict()` the one reader, which
checks every field it reads and names the first wrong one. A record a newer hicache wrote
keeps the keys this one does not know. Pure and stdlib only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hicache_cli.analysis.kinds import CauseKind, FailureKind, Status, Verdict
from hicache_cli.config import RunConfig
from hicache_cli.records import Record, ShapeError, field_spec, join, record_fields, replace
from hicache_cli.targets import (
    AttachSection,
    FollowSection,
    ModelSection,
    SGLangSection,
    TargetSection,
    TraceSection,
)

__all__ = [
    "AttachSection",
    "Backlog",
    "Cause",
    "CauseKind",
    "Environment",
    "Failure",
    "FailureKind",
    "FollowSection",
    "GpuMemory",
    "Interruption",
    "LoopLatency",
    "MemoryKinds",
    "Messages",
    "ModelSection",
    "PPConsistency",
    "PeerMessages",
    "RankReport",
    "Rebuilt",
    "Report",
    "Rss",
    "SGLangSection",
    "Series",
    "ShapeError",
    "Shutdown",
    "Site",
    "Stuck",
    "Status",
    "TargetSection",
    "TraceSection",
    "UnwaitedSend",
    "Verdict",
    "WorkList",
    "Works",
]

REQUIRED = {"required": True}


@dataclass(frozen=True)
class Interruption(Record):
    signal: str | None = None
    to: str | None = None  # hicache | torchrun | ranks
    message: str | None = None


@dataclass(frozen=True)
class Failure(Record):
    rank: int | None = field_spec(required=True)
    kind: FailureKind | str = field_spec(required=True, default=FailureKind.CRASH)
    exit_code: int | None = None
    signal: str | None = None
    message: str = field_spec(required=True, default="")
    stack_file: str | None = None
    at_s: float | None = None
    consequence_of: int | None = None  # the rank whose failure this one follows from (absent: a cause)
    # a rank that raised: what kind of error its final line said (protocol.ErrorKind), the peer it concerns
    error_kind: str | None = None
    peer: int | None = None

    def omit(self) -> frozenset[str]:
        return frozenset(k for k in ("consequence_of", "error_kind", "peer") if getattr(self, k) is None)

    def line(self) -> str:
        return f"rank {self.rank} {self.kind}: {self.message}"


@dataclass(frozen=True)
class Environment(Record):
    hicache_version: str | None = None  # absent (None) in reports written before it was recorded
    torch_version: str | None = None
    backend: str | None = None
    pp_backend: str | None = None
    device: str | None = None
    host: str | None = None
    cpu_count: int | None = None
    python: str | None = None
    platform: str | None = None
    devices: list[str] | None = None  # what the ranks ran on ("cpu" or a GPU model)


@dataclass(frozen=True)
class Rss(Record):
    start_bytes: int | None = None
    end_bytes: int | None = field_spec(required=True)
    peak_bytes: int | None = None
    slope_mb_per_h: float | None = field_spec(required=True)
    slope_ci95_mb_per_h: list[float] | None = field_spec(required=True, length=2)  # [low, high]
    detection_floor_mb_per_h: float | None = None
    trend_p_value: float | None = None
    autocorrelation: float | None = None

    def check(self, where: str) -> None:
        if self.slope_ci95_mb_per_h is not None and self.slope_mb_per_h is None:
            raise ShapeError(f"{join(where, 'slope_mb_per_h')}: null beside an interval")

    def trend_text(self, sep: str = ",") -> str | None:
        """The slope and its interval in MB/h, `+22 [+0,+42]`; None without a trend."""
        ci = self.slope_ci95_mb_per_h
        if ci is None or self.slope_mb_per_h is None:
            return None
        return f"{self.slope_mb_per_h:+.0f} [{ci[0]:+.0f}{sep}{ci[1]:+.0f}]"

    def interval_text(self) -> str:
        """`+22 MB/h [95% +0, +42]`, the way the gate's messages say it."""
        ci = self.slope_ci95_mb_per_h or [math.nan, math.nan]
        slope = math.nan if self.slope_mb_per_h is None else self.slope_mb_per_h
        return f"{slope:+.0f} MB/h [95% {ci[0]:+.0f}, {ci[1]:+.0f}]"


@dataclass(frozen=True)
class MemoryKinds(Record):
    """What RSS was made of (smaps_rollup, read about once a second); absent in older reports."""

    readings: int = 0
    anon_start_bytes: int | None = None
    anon_end_bytes: int | None = None
    anon_peak_bytes: int | None = None
    anon_slope_mb_per_h: float | None = None
    anon_slope_ci95_mb_per_h: list[float] | None = field_spec(length=2)  # [low, high]
    uss_end_bytes: int | None = None
    file_backed_end_bytes: int | None = None  # RSS less anonymous memory, at the last reading


@dataclass(frozen=True)
class WorkList(Record):
    max: int = field_spec(required=True, default=0)
    final: int = field_spec(required=True, default=0)
    growth_per_s: float | None = None
    held_bytes_final: int | None = None
    bytes_per_work: float | None = None


@dataclass(frozen=True)
class LoopLatency(Record):
    p50: float | None = field_spec(required=True)
    p99: float | None = field_spec(required=True)
    max: float | None = field_spec(required=True)
    rounds_measured: int | None = None


@dataclass(frozen=True)
class PeerMessages(Record):
    """Messages with one peer in one process group, and the backlog of those sent there:
    sent there and not received by the peer (analysis/messages.py)."""

    peer: int = field_spec(required=True, default=0)
    group: str = field_spec(required=True, default="")
    sent: int = 0
    sent_bytes: int | None = None  # None: not counted (hicache's own ranks)
    received: int = 0
    received_bytes: int | None = None
    backlog: int | None = None  # None: the peer's own counts are unknown (no rank file)
    backlog_per_s: float | None = None


@dataclass(frozen=True)
class Messages(Record):
    sent: int = field_spec(required=True, default=0)
    received: int | None = None
    by_peer: list[PeerMessages] = field(default_factory=list)  # absent in older reports


@dataclass(frozen=True)
class Cause(Record):
    """Why a traced process's memory grows (analysis/causes.py): its live Works, Works it keeps
    dropping unwaited, a message backlog to a peer, or none of them (memory)."""

    kind: CauseKind | str = field_spec(required=True, default=CauseKind.WORKS)
    text: str = field_spec(required=True, default="")
    # works: the top site; backlog: the sender's; dropped: the top dropping one; as `file:line in f (op to rank N)`
    site: str | None = None
    peer: int | None = None  # backlog: the receiver, its group, its size at the end, its growth
    group: str | None = None
    backlog: int | None = None
    per_s: float | None = None  # backlog: messages a second it grows by; dropped: Works dropped a second
    dropped: int | None = None  # dropped: Works dropped unwaited in all

    def omit(self) -> frozenset[str]:
        left_out = {"site"} if self.site is None else set()
        if self.kind != CauseKind.BACKLOG:
            left_out |= {"peer", "group", "backlog"}
        if self.kind not in (CauseKind.BACKLOG, CauseKind.DROPPED):
            left_out.add("per_s")
        if self.kind != CauseKind.DROPPED:
            left_out.add("dropped")
        return frozenset(left_out)


@dataclass(frozen=True)
class UnwaitedSend(Record):
    """Sends a process ended with never waited, from one site (analysis/shutdown.py)."""

    count: int = field_spec(required=True, default=0)
    peer: int | None = None
    file: str | None = None
    line: int | None = None
    function: str | None = None
    op: str | None = None


@dataclass(frozen=True)
class Shutdown(Record):
    """A traced process that ended with sends never waited, or is blocked on one that did."""

    unwaited_sends: list[UnwaitedSend] = field(default_factory=list)
    blocked_in: str | None = None  # `recv from rank 0 at x.py:17`
    lines: list[str] = field(default_factory=list)  # what the trace's view prints


@dataclass(frozen=True)
class Stuck(Record):
    """A traced process that made no progress for the last part of the run (analysis/progress.py)."""

    since_s: float = field_spec(required=True, default=0.0)  # its clock when it last made progress
    for_s: float = field_spec(required=True, default=0.0)  # how long it then stood still
    blocked_in: str | None = None  # `recv from rank 1 at x.py:31`, when the tracer knows
    unresponsive: bool = False  # its samples stopped
    text: str = ""  # what the trace's view prints


@dataclass(frozen=True)
class Backlog(Record):
    outstanding_sends: int = field_spec(required=True, default=0)
    unreceived_messages: int = field_spec(required=True, default=0)


@dataclass(frozen=True)
class GpuMemory(Record):
    end_bytes: int | None = None
    peak_bytes: int | None = None


@dataclass(frozen=True)
class Poll(Record):
    """Where a program asked is_completed() of a site's Works (the first such line)."""

    file: str = ""
    line: int = 0
    function: str = ""


@dataclass(frozen=True)
class Site(Record):
    """Where a traced program created Works, and what became of them."""

    file: str = ""
    line: int = 0
    function: str = ""
    op: str = ""
    peer: int | None = None
    created: int = 0
    waited: int = 0
    completed: int = 0
    dropped: int = 0
    live: int = 0
    live_max: int = 0
    live_bytes: int | None = None
    source: str | None = None  # the line's text; absent in older reports
    backend: str | None = None  # the process group's backend, for send and recv (`gloo`)
    polled: Poll | None = None  # where the program polled its Works with is_completed()


@dataclass(frozen=True)
class Works(Record):
    """`hicache trace`: the Works a process was handed."""

    created: int = 0
    waited: int = 0
    completed: int = 0
    dropped: int = 0
    live_final: int = 0
    live_max: int = 0
    sites: list[Site] = field(default_factory=list)


@dataclass(frozen=True)
class Series(Record):
    """A rank's samples downsampled to at most 200 points: parallel lists."""

    t: list[float] = field_spec(required=True, default=())
    rss_bytes: list[int | None] = field_spec(required=True, default=())
    anon_bytes: list[int | None] | None = None  # the latest anonymous-memory reading at each point (older: none)
    depth: list[int] = field_spec(required=True, default=())
    rounds: list[int] = field(default_factory=list)
    lat_p99_ms: list[float | None] = field(default_factory=list)
    round_age_s: list[float] = field(default_factory=list)
    unreceived: list[int | None] | None = None  # a rank with an upstream: its backlog at each point

    def omit(self) -> frozenset[str]:
        return frozenset(key for key in ("anon_bytes", "unreceived") if getattr(self, key) is None)

    def check(self, where: str) -> None:
        if not len(self.t) == len(self.rss_bytes) == len(self.depth):
            raise ShapeError(f"{where}: t, rss_bytes and depth differ in length")


@dataclass(frozen=True)
class PPConsistency(Record):
    """Whether every PP stage applied the same counts, round by round (DigestCheck)."""

    checked_rounds: int = 0
    last_checked_round: int | None = None
    consistent: bool = True
    first_divergence: dict[str, Any] | None = None  # {round, digests: {rank: digest}}


MEASURED = frozenset({"rss", "work_list", "loop_latency_ms", "rounds_per_s", "messages", "backlog_at_stop"})
UNMEASURED_KEYS = ("rank", "pp_rank", "tp_rank", "verdict", "verdict_reason", "samples", "unreadable_lines")
TRACED_KEYS = frozenset({"slot", "world_size", "works", "shutdown", "stuck"})


@dataclass(frozen=True)
class RankReport(Record):
    rank: int = field_spec(required=True, default=0)
    pp_rank: int = field_spec(required=True, default=0)
    tp_rank: int = field_spec(required=True, default=0)
    pid: int | None = None
    host: str | None = None
    node: int | None = None
    verdict: Verdict | str = field_spec(required=True, default=Verdict.INCONCLUSIVE)
    verdict_reason: str = field_spec(required=True, default="")
    state: str | None = None
    stop: str | None = None
    warmup_s: float | None = None
    rss: Rss | None = None
    memory_kinds: MemoryKinds | None = None
    work_list: WorkList | None = None
    loop_latency: LoopLatency | None = field_spec("loop_latency_ms")
    rounds: int | None = None
    rounds_per_s: float | None = None
    messages: Messages | None = None
    cause: Cause | None = None  # a traced process's memory growth: why (None: no growth to explain)
    backlog_at_stop: Backlog | None = None
    round_age_at_stop_s: float | None = None
    device: str | None = None
    gpu_memory: GpuMemory | None = None
    counters: dict[str, float] | None = None
    samples: int = 0  # 0: the rank wrote nothing, and only the fields above `pid` are set
    unreadable_lines: int = 0  # lines of its file that were not samples (torn, foreign): skipped
    slot: int | None = None  # trace: the rank file's number
    world_size: int | None = None  # trace: the process group's size
    works: Works | None = None  # trace
    shutdown: Shutdown | None = None  # trace: sends it ended with never waited, or blocked on such a peer
    stuck: Stuck | None = None  # trace: it made no progress for the last part of the run
    series: Series | None = None

    @property
    def measured(self) -> bool:
        return self.samples > 0

    @property
    def traced(self) -> bool:
        return self.slot is not None

    @property
    def file_number(self) -> int:
        """The rank file it was read from: a traced process's slot, else its rank."""
        return self.rank if self.slot is None else self.slot

    def omit(self) -> frozenset[str]:
        if not self.measured:
            return frozenset(f.key for f in record_fields(RankReport) if f.key not in UNMEASURED_KEYS)
        return frozenset() if self.traced else TRACED_KEYS

    def check(self, where: str) -> None:
        if self.measured:  # a rank with samples has every measurement the readers read
            for key in ("rss", "work_list", "loop_latency", "messages", "backlog_at_stop"):
                if getattr(self, key) is None:
                    name = "loop_latency_ms" if key == "loop_latency" else key
                    raise ShapeError(f"{join(where, name)}: null, expected an object")

    @classmethod
    def required_keys(cls, data: Any) -> frozenset[str]:
        samples = data.get("samples", 0)
        return MEASURED if isinstance(samples, int) and not isinstance(samples, bool) and samples > 0 else frozenset()


@dataclass(frozen=True)
class Rebuilt(Record):
    """`hicache report build`: when, by which hicache, and the fields only the launching
    hicache knew (estimated, or unknown: null) (execution.rebuild_report)."""

    at: float = field_spec(required=True, default=0.0)
    hicache_version: str | None = None
    estimated: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Report(Record):
    """One run's report (docs/report.md). `path` is where it was read from or written to."""

    schema_version: int = 1
    status: Status | str = field_spec(required=True, default=Status.COMPLETED)
    interruption: Interruption | None = None
    config: RunConfig = field_spec(required=True, default=RunConfig())
    target: TargetSection | None = None
    environment: Environment = field_spec(required=True, default=Environment())
    verdict: Verdict | str = field_spec(required=True, default=Verdict.INCONCLUSIVE)
    failures: list[Failure] = field_spec(required=True, default=())
    root_cause: int | None = None
    stopped_early: str | None = None
    run_s: float | None = None
    pp_consistency: PPConsistency | None = None
    wall_s: float | None = None
    startup_s: float | None = None
    torchrun_exit_code: int | None = None
    program_exit_code: int | None = None
    program_stopped: str | None = None
    launcher_cpu_s: float | None = None
    rebuilt: Rebuilt | None = None  # only in a report `report build` wrote
    ranks: list[RankReport] = field_spec(required=True, default=())
    path: Path | None = field(default=None, compare=False, metadata={"local": True})  # not in the JSON

    def omit(self) -> frozenset[str]:
        return frozenset() if self.rebuilt is not None else frozenset({"rebuilt"})

    @classmethod
    def read(cls, data: dict[str, Any], path: Path | None = None) -> Report:
        return replace(cls.from_dict(data), path=path)

    def at(self, path: Path | None) -> Report:
        """The same report, written to (or read from) `path`."""
        return replace(self, path=path)

    def rank(self, rank: int) -> RankReport:
        """The report of torch.distributed rank `rank` (the first, for a traced program that
        made several process groups)."""
        for r in self.ranks:
            if r.rank == rank:
                return r
        raise KeyError(f"no rank {rank} in this report")

    @property
    def measured_ranks(self) -> list[RankReport]:
        return [r for r in self.ranks if r.measured]

    @property
    def leaking_ranks(self) -> list[RankReport]:
        return [r for r in self.ranks if r.verdict == Verdict.LEAK]

    @property
    def traced(self) -> bool:
        """Someone else's program, traced or attached to: its processes are read as traced ones."""
        return self.target is not None and self.target.traced

    @property
    def interrupted(self) -> bool:
        return self.status == Status.INTERRUPTED

    @property
    def stop_signal(self) -> str | None:
        """The signal that interrupted the run, when one did."""
        return self.interruption.signal if self.interruption is not None else None
