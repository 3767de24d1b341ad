"""What a run measures: a typed target. hicache's own cache model under a drain policy
(`ModelTarget`), SGLang's own PP-sync methods (`SGLangTarget`), both run by hicache's ranks
under torchrun; or someone else's program, traced (`TracedCommand`) or attached to while it
runs (`AttachedProcess`).

Each is a frozen record written with its `kind` (config.json's `target`); each knows its name
(`label`, where a policy's name goes), its one-line title and how many rank files to expect.
Who launches it (execution.py), what the report says of it (analysis/report.py) and its
command are looked up by its type. Stdlib only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hicache_cli.attached import AttachedPid
from hicache_cli.errors import UsageError
from hicache_cli.records import Record, ShapeError, field_spec, spec

DEFAULT_POLICY = "reap"  # the incident's: hicache's model leaks under it
MAX_WORLD_SIZE = 64
MAX_ROUND_TIME_S = 10.0  # --round-time: a round of a server, not a pause of minutes
DEVICES = ("auto", "cpu", "cuda")
PP_BACKENDS = ("gloo", "nccl")
# SGLang's methods that free the PP sync's Works, and how (sglang_target/extract takes them).
DRAIN_METHODS = {
    "_reap_completed_async_work": "reaps completed Works (is_completed poll)",
    "_drain_async_work": "drains every Work (wait())",
}


@dataclass(frozen=True)
class Target(Record):
    """Base of the target kinds: read back by `kind`."""

    kind: ClassVar[str] = ""
    # its run directory may be handed in part to processes of another user (an attach's
    # agents): rundir.create_run_dir then makes it strictly (docs/security.md, "Attaching")
    private_run_dir: ClassVar[bool] = False
    # the library call that runs it (hicache_cli.run takes a config of hicache's own ranks only)
    api_call: ClassVar[str] = "run(config)"
    # what only the launching hicache knew of it, lost when `report build` rebuilds the report
    launcher_only: ClassVar[tuple[str, ...]] = ()
    # off a terminal, a progress line this often (seconds of run time)
    progress_every_s: ClassVar[float] = 2.0

    @property
    def label(self) -> str:
        """The run's name where a policy's would go (a run directory, a table row)."""
        return self.kind

    def title(self, duration_s: float | None, sep: str = "  ") -> str:
        raise NotImplementedError

    @property
    def expected_ranks(self) -> int | None:
        """Rank files the run will have; None: found as the target starts them."""
        return None

    def validate(self) -> None:
        """Raise UsageError with the CLI's one line for a value it would refuse."""

    def section(self, facts: RunFacts) -> TargetSection:
        """What the report says of the target (its `target`)."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **super().to_dict()}

    @classmethod
    def from_dict(cls, data: Any, where: str = "") -> Target:
        if cls is Target:
            kind = data.get("kind") if isinstance(data, dict) else None
            if not isinstance(kind, str) or kind not in KINDS:  # (a list is no key: TypeError)
                raise ShapeError(f"{where or 'target'}.kind: {repr(kind)[:60]}; expected one of {', '.join(KINDS)}")
            return KINDS[kind].from_dict(data, where)
        return super().from_dict({k: v for k, v in data.items() if k != "kind"}, where)


@dataclass(frozen=True)
class RankedTarget(Target):
    """A target hicache runs on pp x tp ranks of its own under torchrun: the shape, the
    devices, the workload and the faults injected."""

    pp: int = 2
    tp: int = 1
    workload: str = "mixed"
    request_rate: float | None = None  # None: the workload preset's value
    prefix_sharing: float | None = None
    idle_fraction: float | None = None
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda (auto: cuda when the rank sees a GPU)
    backend: str = "gloo"  # the default group's
    pp_backend: str = "gloo"  # the TP and PP-sync groups': gloo (as SGLang) or nccl (CUDA tensors)
    stop_grace_s: float = 1.5  # how long a rank blocked at the deadline gets to finish its round
    faults: tuple[str, ...] = ()  # --fault specs, see hicache_model/faults.py
    round_time_s: float = 0.0  # each round lasts at least this long (a forward's GPU time); 0: as fast as it runs

    @property
    def world_size(self) -> int:
        return self.pp * self.tp

    @property
    def expected_ranks(self) -> int:
        return self.world_size

    def title(self, duration_s: float | None, sep: str = "  ") -> str:
        """`drain  pp=2 tp=1  15s` (the result table's title)."""
        parts = [self.label, f"pp={self.pp} tp={self.tp}"]
        return sep.join([*parts, f"{duration_s:g}s"] if duration_s is not None else parts)

    def validate(self) -> None:
        from hicache_model.faults import FaultSpecError, parse_fault  # the cache model's registries: no torch
        from hicache_model.workload import PRESETS

        for name, value in (("pp", self.pp), ("tp", self.tp)):
            if value < 1:
                raise UsageError(f"--{name} must be at least 1, got {value}")
        if self.world_size > MAX_WORLD_SIZE:
            raise UsageError(f"--pp x --tp = {self.world_size} ranks; at most {MAX_WORLD_SIZE} are supported")
        if self.workload not in PRESETS:
            raise UsageError(f"--workload: unknown workload {self.workload!r}; choose one of: {', '.join(PRESETS)}")
        for name, value in (
            ("request-rate", self.request_rate),
            ("prefix-sharing", self.prefix_sharing),
            ("idle-fraction", self.idle_fraction),
        ):
            if value is not None and not 0.0 <= value <= 1.0:
                raise UsageError(f"--{name} must be between 0 and 1, got {value}")
        if not (math.isfinite(self.round_time_s) and 0 <= self.round_time_s <= MAX_ROUND_TIME_S):
            raise UsageError(f"--round-time must be 0 to {MAX_ROUND_TIME_S:g} s, got {self.round_time_s!r}")
        if self.device not in DEVICES:
            raise UsageError(f"--device: {self.device!r}; choose one of: {', '.join(DEVICES)}")
        if self.pp_backend not in PP_BACKENDS:
            raise UsageError(f"--pp-backend: {self.pp_backend!r}; choose one of: {', '.join(PP_BACKENDS)}")
        if self.pp_backend == "nccl" and self.device == "cpu":
            raise UsageError("--pp-backend nccl sends CUDA tensors: it needs --device cuda (or auto on a GPU machine)")
        for fault in self.faults:
            try:
                parse_fault(fault, self.world_size)
            except FaultSpecError as exc:
                raise UsageError(f"--fault: {exc}") from None


@dataclass(frozen=True)
class ModelTarget(RankedTarget):
    """hicache's own cache model (hicache_model/) under a drain policy."""

    kind: ClassVar[str] = "model"
    policy: str = DEFAULT_POLICY
    wait_timeout_s: float = 5.0  # bounded-drain: the longest a round's drain may wait
    device_pool_tokens: int = 4096
    host_pool_tokens: int = 16384
    cache_warmup_rounds: int = 10000  # rounds run before the clock starts (Scheduler.warm_up)

    @property
    def label(self) -> str:
        return self.policy

    def section(self, facts: RunFacts) -> TargetSection:
        return ModelSection(policy=self.policy)

    def validate(self) -> None:
        from hicache_cli.units import MAX_TIMEOUT_S, format_limit
        from hicache_model.policies import POLICIES

        super().validate()
        if self.policy not in POLICIES:
            raise UsageError(f"--policy: unknown policy {self.policy!r}; choose one of: {', '.join(POLICIES)}")
        if not (math.isfinite(self.wait_timeout_s) and 0 < self.wait_timeout_s <= MAX_TIMEOUT_S):
            raise UsageError(
                f"--wait-timeout: must be more than zero and at most {format_limit(MAX_TIMEOUT_S)}, "
                f"got {self.wait_timeout_s:g}s"
            )


@dataclass(frozen=True)
class SGLangTarget(RankedTarget):
    """SGLang's own PP-sync methods, taken from the user's copy (sglang_target/resolve.py):
    enough for a rank to find the file again and check it is the one the CLI read."""

    kind: ClassVar[str] = "sglang"
    workload: str = "idle"  # SGLang's holder serves no requests: the incident's idle server
    version: str = field_spec(required=True, default="")
    origin: str = ""
    location: str = ""
    class_name: str = field_spec("class", required=True, default="")
    file: str = field_spec(required=True, default="")
    sha256: str = field_spec(required=True, default="")
    tags_file: str = ""
    drain_method: str = ""
    unresolved: str = ""

    @property
    def label(self) -> str:
        return f"sglang-{self.version}"

    def how_it_frees(self) -> str:
        return how_it_frees(self.drain_method)

    def section(self, facts: RunFacts) -> TargetSection:
        """The code that ran, and how many PP-sync messages a round sent (rank 0)."""
        per_round = round(facts.sent / facts.rounds, 3) if facts.rounds and facts.sent is not None else None
        return SGLangSection(
            version=self.version,
            origin=self.origin,
            location=self.location,
            class_name=self.class_name,
            file=self.file,
            sha256=self.sha256,
            tags_file=self.tags_file,
            drain_method=self.drain_method,
            unresolved=self.unresolved,
            sends_per_round=per_round,
        )


@dataclass(frozen=True)
class TracedCommand(Target):
    """Someone else's program (`hicache trace -- COMMAND`): every process below it that
    starts a torch.distributed process group is observed."""

    kind: ClassVar[str] = "trace"
    api_call: ClassVar[str] = "trace(command)"
    command: tuple[str, ...] = field_spec(required=True, default=())
    loop: str | None = None  # MODULE:QUALNAME of a function called once per round
    cwd: str = ""  # where it ran

    def title(self, duration_s: float | None, sep: str = "  ") -> str:
        return f"trace: {' '.join(self.command)}"

    def section(self, facts: RunFacts) -> TargetSection:
        return TraceSection(argv=list(self.command), cwd=self.cwd, loop=self.loop, processes=facts.processes)


@dataclass(frozen=True)
class AttachedProcess(Target):
    """Processes already running (`hicache attach PID...`): each pid, and every Python process
    below it that has a process group, is attached to, censused, traced, then detached."""

    kind: ClassVar[str] = "attach"
    private_run_dir: ClassVar[bool] = True
    api_call: ClassVar[str] = "attach_to(pids)"
    launcher_only: ClassVar[tuple[str, ...]] = ("target.processes (how each process was attached, its census)",)
    pids: tuple[int, ...] = field_spec(required=True, default=())
    census: bool = True  # the Works already held, by holder, at attach and at detach
    answer_s: float = 30.0  # how long a process has to run the injected text (its main thread back in Python)

    def title(self, duration_s: float | None, sep: str = "  ") -> str:
        return f"attach: pid {', '.join(map(str, self.pids))}"

    @property
    def follow(self) -> tuple[float, float] | None:
        """(census every, tracer window) in seconds when followed; None: traced throughout."""
        return None

    def validate(self) -> None:
        if not self.pids:
            raise UsageError("name the process to attach to, e.g. hicache attach 12345")
        for pid in self.pids:
            if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
                raise UsageError(f"pid {pid!r}: a process id is a whole number above 0")
        if not (math.isfinite(self.answer_s) and self.answer_s > 0):
            raise UsageError(f"answer_s must be more than zero, got {self.answer_s:g}")

    def section(self, facts: RunFacts) -> TargetSection:
        return AttachSection(pids=list(self.pids), processes=list(facts.attached))


@dataclass(frozen=True)
class FollowedProcess(AttachedProcess):
    """Processes followed for as long as they run (`hicache attach --follow PID`): attached as
    an attach is, and ranks started below the pids later too, but traced only in short
    windows when a holder's population grows (attach/follow.py): a census every
    `census_every_s` in between. Until stopped, or every process is gone."""

    kind: ClassVar[str] = "follow"
    api_call: ClassVar[str] = "attach_to(pids, follow=True)"
    progress_every_s: ClassVar[float] = 60.0  # a sidecar's log: a line a minute, for days
    census_every_s: float = 15.0
    window_s: float = 10.0  # the tracer's hooks on, once a holder grows with no line known
    # how long hicache waits for the injected text to run before going on: one whose main thread
    # comes back to Python later (a rank in init_process_group waiting for its peers) is
    # attached then, its answer looked for at every scan
    answer_s: float = 5.0

    def title(self, duration_s: float | None, sep: str = "  ") -> str:
        return f"attach --follow: pid {', '.join(map(str, self.pids))}"

    @property
    def follow(self) -> tuple[float, float] | None:
        return (self.census_every_s, self.window_s)

    def validate(self) -> None:
        super().validate()
        if not self.census:
            raise UsageError("--follow counts the Works held by census: it does not go with --no-census")
        for flag, value, least in (("--census-every", self.census_every_s, 1.0), ("--window", self.window_s, 0.5)):
            if not (math.isfinite(value) and value >= least):
                raise UsageError(f"{flag}: {value:g} s is too short; at least {least:g} s")

    def section(self, facts: RunFacts) -> TargetSection:
        return FollowSection(pids=list(self.pids), processes=list(facts.attached))


# -- what the report says of each target (the report's `target`) ------------------------------


@dataclass(frozen=True)
class RunFacts:
    """What a target's report section may need of the run: how many processes were measured,
    and rank 0's rounds and PP-sync sends."""

    processes: int = 0
    rounds: int | None = None
    sent: int | None = None
    attached: tuple[AttachedPid, ...] = ()  # hicache attach: each pid, how it went, its census


@dataclass(frozen=True)
class TargetSection(Record):
    """What ran the PP sync (the report's `target`): one record per kind, read by its `kind`."""

    kind: str = field_spec(required=True, default="")
    # someone else's processes, traced or attached to: the report reads them as traced ones
    traced: ClassVar[bool] = False

    def title(self, ran: Target) -> str:
        """What ran, in a few words (the page's title, a table's)."""
        return ran.title(None)

    def line(self) -> str | None:
        """One line more on what ran, said under the verdicts (None: nothing to add)."""
        return None

    def command(self) -> list[str]:
        """The program that ran, as its argv ([] for hicache's own ranks and attached ones)."""
        return []

    @classmethod
    def from_dict(cls, data: Any, where: str = "") -> TargetSection:
        if cls is TargetSection and isinstance(data, dict):
            kind = data.get("kind")
            section = _SECTIONS.get(kind) if isinstance(kind, str) else None  # (a list is no key: TypeError)
            if section is not None:
                return section.from_dict(data, where)
        return super().from_dict(data, where)


@dataclass(frozen=True)
class ModelSection(TargetSection):
    kind: str = "model"
    policy: str | None = None

    def title(self, ran: Target) -> str:
        return f"{ran.label}, {_shape(ran)}"


@dataclass(frozen=True)
class SGLangSection(TargetSection):
    """Which SGLang code ran the PP sync, and how many PP-sync messages a round sent (rank 0)."""

    kind: str = "sglang"
    version: str = field_spec(required=True, default="")
    origin: str = field_spec(required=True, default="")
    location: str = field_spec(required=True, default="")
    class_name: str = field_spec("class", required=True, default="")
    file: str | None = None
    sha256: str = field_spec(required=True, default="")
    tags_file: str | None = None
    drain_method: str | None = None
    unresolved: str | None = None
    sends_per_round: float | None = None

    def omit(self) -> frozenset[str]:
        """What the config's entry did not have (older reports) stays out."""
        return frozenset(k for k in ("file", "tags_file", "drain_method", "unresolved") if getattr(self, k) is None)

    def title(self, ran: Target) -> str:
        where = ".".join(str(x) for x in (self.class_name, self.drain_method) if x)
        return f"SGLang {self.version or '?'}" + (f" ({where})" if where else "") + f", {_shape(ran)}"

    def line(self) -> str:
        method = self.drain_method or "no known drain method"
        per_round = self.sends_per_round
        sends = f"; {per_round:g} PP-sync sends per round" if per_round is not None else ""
        return (
            f"SGLang {self.version} {self.class_name} ({self.origin}: {self.location}): "
            f"{method} {how_it_frees(self.drain_method)}{sends}; sha256 {self.sha256[:12]}"
        )


@dataclass(frozen=True)
class TraceSection(TargetSection):
    """A traced program: the command, its --loop function, the processes observed."""

    kind: str = "trace"
    traced: ClassVar[bool] = True
    argv: list[str] = field(default_factory=list, metadata=spec("command"))  # a method is named command
    cwd: str | None = None
    loop: str | None = None
    processes: int | None = None

    def title(self, ran: Target) -> str:
        return "trace of " + (" ".join(map(str, self.argv)) if self.argv else "a program")

    def command(self) -> list[str]:
        return list(self.argv or [])


@dataclass(frozen=True)
class AttachSection(TargetSection):
    """Processes attached to: the pids asked for and, per process tried, how it was attached
    and detached and its census by holder (attached.py)."""

    kind: str = "attach"
    traced: ClassVar[bool] = True
    pids: list[int] = field(default_factory=list)
    processes: list[AttachedPid] = field(default_factory=list)

    def process(self, pid: int | None) -> AttachedPid | None:
        return next((p for p in self.processes if p.pid == pid), None)


@dataclass(frozen=True)
class FollowSection(AttachSection):
    """Processes followed: as an attach's, each holder with its trend and the lines that made
    its Works where a tracer window found them."""

    kind: str = "follow"


_SECTIONS: dict[str, type[TargetSection]] = {
    s.kind: s for s in (ModelSection, SGLangSection, TraceSection, AttachSection, FollowSection)
}


KINDS: dict[str, type[Target]] = {
    t.kind: t for t in (ModelTarget, SGLangTarget, TracedCommand, AttachedProcess, FollowedProcess)
}
AnyTarget = ModelTarget | SGLangTarget | TracedCommand | AttachedProcess | FollowedProcess


def _shape(ran: Target) -> str:
    return f"pp={ran.pp} tp={ran.tp}" if isinstance(ran, RankedTarget) else ran.label


def how_it_frees(drain_method: str | None) -> str:
    """What a Work-freeing method of SGLang's does, in words."""
    return DRAIN_METHODS.get(drain_method or "", "frees Works some other way")


def waits_on_next_stage(frame: str | None) -> bool:
    """Whether a stack top like "_drain_async_work (hiradix_cache.py:242)" is SGLang's loop
    waiting on its isends, i.e. on the next stage to receive."""
    return frame is not None and frame.split(" ", 1)[0] in DRAIN_METHODS
