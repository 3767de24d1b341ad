"""The report as typed values: what `hicache_cli.run()` returns and `load_report()` reads.

Each record is read from the report's JSON object and keeps it: `to_dict()` gives back
exactly the JSON that was written (keys a newer hicache added within the schema version
included), while the attributes give typed access to what the schema documents
(docs/report.md). Verdicts and statuses are enums that compare equal to their strings.
Pure and stdlib only.
"""

from __future__ import annotations

import copy
import enum
import functools
import types
import typing
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from hicache_cli.config import StressConfig


class _Text(str, enum.Enum):
    """A str enum that prints and formats as its value."""

    __str__ = str.__str__
    __format__ = str.__format__


class Verdict(_Text):
    LEAK = "LEAK"
    BOUNDED = "BOUNDED"
    INCONCLUSIVE = "INCONCLUSIVE"


class Status(_Text):
    COMPLETED = "completed"  # every rank ran to its deadline (or the program to its end)
    FAILED = "failed"  # see Report.failures
    INTERRUPTED = "interrupted"  # a stop signal; the report holds what was measured until then


R = TypeVar("R", bound="_Record")


def _key(name: str) -> dict[str, str]:
    """A field whose JSON key is not its name (`class`, `loop_latency_ms`)."""
    return {"key": name}


@dataclass(frozen=True)
class _Record:
    """Typed fields read from one JSON object, which the record keeps for to_dict()."""

    _source: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_dict(cls: type[R], data: dict[str, Any]) -> R:
        values = {name: _convert(data.get(key), hint) for name, key, hint in _json_fields(cls)}
        return cls(_source=data, **values)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object this record was read from (a copy: records never change)."""
        return copy.deepcopy(self._source)


@functools.cache
def _json_fields(cls: type) -> tuple[tuple[str, str, Any], ...]:
    """(attribute, JSON key, type) of each field read from the JSON object."""
    hints = typing.get_type_hints(cls)
    return tuple(
        (f.name, f.metadata.get("key", f.name), hints[f.name])
        for f in fields(cls)
        if f.name != "_source" and not f.metadata.get("local")
    )


def _convert(raw: Any, hint: Any) -> Any:
    """Records (and the run's StressConfig) from objects, lists of them from lists, enums
    from their values (a value a newer hicache added stays text); the rest as JSON has it."""
    if raw is None:
        return None
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for option in options:
        if isinstance(option, type) and hasattr(option, "from_dict") and isinstance(raw, dict):
            return option.from_dict(raw)
        if isinstance(option, type) and issubclass(option, enum.Enum):
            try:
                return option(raw)
            except ValueError:
                return raw
        if typing.get_origin(option) is list and isinstance(raw, list):
            (item,) = typing.get_args(option)
            return [_convert(x, item) for x in raw]
    return raw


@dataclass(frozen=True)
class Interruption(_Record):
    signal: str | None = None
    to: str | None = None  # hicache | torchrun | ranks
    message: str | None = None


@dataclass(frozen=True)
class Failure(_Record):
    rank: int | None = None
    kind: str = ""  # error | crash | stall | hang | timeout
    message: str = ""
    exit_code: int | None = None
    signal: str | None = None
    stack_file: str | None = None
    at_s: float | None = None
    consequence_of: int | None = None


@dataclass(frozen=True)
class Target(_Record):
    kind: str = "model"  # model | sglang | trace
    policy: str | None = None  # model
    version: str | None = None  # sglang: which code ran the PP sync
    origin: str | None = None
    location: str | None = None
    class_name: str | None = field(default=None, metadata=_key("class"))
    file: str | None = None
    sha256: str | None = None
    drain_method: str | None = None
    sends_per_round: float | None = None
    command: list[str] | None = None  # trace: the program
    cwd: str | None = None
    loop: str | None = None
    processes: int | None = None


@dataclass(frozen=True)
class Environment(_Record):
    hicache_version: str | None = None  # absent (None) in reports written before it was recorded
    torch_version: str | None = None
    backend: str | None = None
    pp_backend: str | None = None
    device: str | None = None
    devices: list[str] | None = None
    host: str | None = None
    cpu_count: int | None = None
    python: str | None = None
    platform: str | None = None


@dataclass(frozen=True)
class Rss(_Record):
    start_bytes: int | None = None
    end_bytes: int | None = None
    peak_bytes: int | None = None
    slope_mb_per_h: float | None = None
    slope_ci95_mb_per_h: list[float] | None = None  # [low, high]
    detection_floor_mb_per_h: float | None = None
    trend_p_value: float | None = None
    autocorrelation: float | None = None


@dataclass(frozen=True)
class MemoryKinds(_Record):
    """What RSS was made of (smaps_rollup, read about once a second); absent in older reports."""

    readings: int = 0
    anon_start_bytes: int | None = None
    anon_end_bytes: int | None = None
    anon_peak_bytes: int | None = None
    anon_slope_mb_per_h: float | None = None
    anon_slope_ci95_mb_per_h: list[float] | None = None  # [low, high]
    uss_end_bytes: int | None = None
    file_backed_end_bytes: int | None = None  # RSS less anonymous memory, at the last reading


@dataclass(frozen=True)
class WorkList(_Record):
    max: int = 0
    final: int = 0
    growth_per_s: float | None = None
    held_bytes_final: int | None = None
    bytes_per_work: float | None = None


@dataclass(frozen=True)
class LoopLatency(_Record):
    p50: float | None = None
    p99: float | None = None
    max: float | None = None
    rounds_measured: int | None = None


@dataclass(frozen=True)
class PeerMessages(_Record):
    """Messages with one peer in one process group, and the backlog of those sent there (issue 25)."""

    peer: int = 0
    group: str = ""
    sent: int = 0
    sent_bytes: int | None = None
    received: int = 0
    received_bytes: int | None = None
    backlog: int | None = None
    backlog_per_s: float | None = None


@dataclass(frozen=True)
class Messages(_Record):
    sent: int = 0
    received: int | None = None
    by_peer: list[PeerMessages] = field(default_factory=list)  # absent in older reports


@dataclass(frozen=True)
class Cause(_Record):
    """`hicache trace`: why memory grows (issue 25): works, backlog or memory."""

    kind: str = ""
    text: str = ""
    site: str | None = None  # works: the top site; backlog: the sender's, as `file:line in f (op to rank N)`
    peer: int | None = None  # backlog
    group: str | None = None
    backlog: int | None = None
    per_s: float | None = None


@dataclass(frozen=True)
class Shutdown(_Record):
    """`hicache trace`: a process that ended with sends never waited, or blocked on one that did."""

    unwaited_sends: list[dict[str, Any]] = field(default_factory=list)
    blocked_in: str | None = None
    lines: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Backlog(_Record):
    outstanding_sends: int = 0
    unreceived_messages: int = 0


@dataclass(frozen=True)
class Site(_Record):
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


@dataclass(frozen=True)
class Works(_Record):
    """`hicache trace`: the Works a process was handed."""

    created: int = 0
    waited: int = 0
    completed: int = 0
    dropped: int = 0
    live_final: int = 0
    live_max: int = 0
    sites: list[Site] = field(default_factory=list)


@dataclass(frozen=True)
class RankReport(_Record):
    rank: int = 0
    pp_rank: int = 0
    tp_rank: int = 0
    verdict: Verdict | str = Verdict.INCONCLUSIVE
    verdict_reason: str = ""
    samples: int = 0  # 0: the rank wrote nothing, and only the fields above are set
    pid: int | None = None
    slot: int | None = None  # trace: the rank file's number
    world_size: int | None = None  # trace: the process group's size
    host: str | None = None
    node: int | None = None
    state: str | None = None
    stop: str | None = None
    warmup_s: float | None = None
    rss: Rss | None = None
    memory_kinds: MemoryKinds | None = None
    work_list: WorkList | None = None
    works: Works | None = None
    loop_latency: LoopLatency | None = field(default=None, metadata=_key("loop_latency_ms"))
    rounds: int | None = None
    rounds_per_s: float | None = None
    messages: Messages | None = None
    cause: Cause | None = None  # issue 25
    shutdown: Shutdown | None = None  # issue 25
    backlog_at_stop: Backlog | None = None
    round_age_at_stop_s: float | None = None
    device: str | None = None
    gpu_memory: dict[str, int] | None = None
    counters: dict[str, float] | None = None
    series: dict[str, list[Any]] | None = None  # parallel lists t, rss_bytes, depth, ...


@dataclass(frozen=True)
class Report(_Record):
    """One run's report (docs/report.md). `path` is where it was read from or written to."""

    schema_version: int = 1
    status: Status | str = Status.COMPLETED
    verdict: Verdict | str = Verdict.INCONCLUSIVE
    interruption: Interruption | None = None
    config: StressConfig | None = None
    target: Target | None = None
    environment: Environment | None = None
    failures: list[Failure] = field(default_factory=list)
    root_cause: int | None = None
    stopped_early: str | None = None
    run_s: float | None = None
    wall_s: float | None = None
    startup_s: float | None = None
    pp_consistency: dict[str, Any] | None = None
    torchrun_exit_code: int | None = None
    program_exit_code: int | None = None
    program_stopped: str | None = None
    launcher_cpu_s: float | None = None
    rebuilt: dict[str, Any] | None = None  # `report build`: what was estimated or unknown (issue 25)
    ranks: list[RankReport] = field(default_factory=list)
    path: Path | None = field(default=None, compare=False, metadata={"local": True})  # not in the JSON

    @classmethod
    def read(cls, data: dict[str, Any], path: Path | None = None) -> Report:
        return replace(cls.from_dict(data), path=path)

    def rank(self, rank: int) -> RankReport:
        """The report of torch.distributed rank `rank` (the first, for a traced program that
        made several process groups)."""
        for r in self.ranks:
            if r.rank == rank:
                return r
        raise KeyError(f"no rank {rank} in this report")

    @property
    def leaking_ranks(self) -> list[RankReport]:
        return [r for r in self.ranks if r.verdict == Verdict.LEAK]
