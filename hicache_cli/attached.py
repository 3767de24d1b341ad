"""What the report says of a process hicache attached to (`hicache attach`, docs/attach.md):
how each pid was attached and detached, and its census - the Works its Python objects held,
by holder, when hicache attached and when it detached, and what taking it cost.

Core records, stdlib only: launch/attach_launcher.py makes them from the agents' files in the
run directory (attach/protocol.py's Census and AgentStatus) and what the injection took;
the report's target section carries them (targets.AttachSection); present/ shows them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hicache_cli.records import Record, field_spec


def place_text(file: object, line: object, function: object) -> str:
    """Where a Work was made, as the report, the metrics and the lines say it: `relay.py:29 in
    forward` with the file's whole path."""
    return f"{file}:{line} in {function}"


@dataclass(frozen=True)
class HolderCount(Record):
    """One holder of Works, named by the path that reaches it (`Scheduler.sync_works`), at
    attach and at detach."""

    path: str = field_spec(required=True, default="")
    container: str = ""  # the type holding the Works directly: list, dict, deque, a record class
    works: int = 0  # at attach (0: the holder appeared while attached)
    completed: int = 0  # of those, how many said is_completed()
    containers: int = 1  # how many such containers were grouped under the path
    tensor_bytes: int | None = None  # tensors held beside the Works, where the census could see them
    named: bool = True  # False: nothing Python can see refers to the container
    works_end: int | None = None  # at detach (None: no census at detach)
    completed_end: int | None = None
    growth: int | None = None  # works_end - works
    # hicache attach --follow: Works gained per hour over the last censuses, and where the holder's
    # Works were made ("file:line in function", most first) when a tracer window saw them made
    per_hour: float | None = None
    sites: list[str] = field(default_factory=list)

    @property
    def held(self) -> int:
        """Works held at the last census."""
        return self.works if self.works_end is None else self.works_end

    def line(self) -> str:
        """`Scheduler.sync_works` holds 1,900 Works, 0 completed (+1,055 while attached)."""
        name = f"`{self.path}`" if self.named else self.path
        done = self.completed if self.completed_end is None else self.completed_end
        grew = f" ({self.growth:+,} while attached)" if self.growth is not None else " (at attach)"
        return f"{name} holds {self.held:,} Works, {done:,} completed{grew}"


@dataclass(frozen=True)
class CensusCost(Record):
    """What the census at attach cost the process: the GIL it held."""

    objects: int = 0  # objects the garbage collector tracked (the walk's size)
    snapshot_s: float = 0.0  # the GIL held taking them: one hold, or chunks on a big or frozen heap
    frozen: int = 0  # of them, objects the program had frozen with gc.freeze()
    unseen: str = ""  # why objects the collector tracks were not examined, when some were not
    busy_s: float = 0.0  # the GIL held by the walks in all
    max_hold_s: float = 0.0  # the longest single hold
    walk_s: float = 0.0  # the census's wall time, the pauses between chunks included
    pause_per_million_s: float | None = None  # (snapshot + walks) per million tracked objects
    truncated: bool = False  # its budget ran out: the census is partial


@dataclass(frozen=True)
class PolledBefore(Record):
    """Where the program asked is_completed() of Works made before hicache attached (the
    census's), and what they answered, while it was attached."""

    file: str = ""
    line: int = 0
    function: str = ""
    polls: int = 0
    true: int = 0  # polls that answered True

    def text(self) -> str:
        """`polled with is_completed() at reap.py:38 in <module>: 2,018 polls, none True`."""
        answered = "none True" if self.true == 0 else f"{self.true:,} True"
        where = f"{self.file.rsplit('/', 1)[-1]}:{self.line}" + (f" in {self.function}" if self.function else "")
        return f"polled with is_completed() at {where}: {self.polls:,} polls, {answered}"


@dataclass(frozen=True)
class ProcessEnd(Record):
    """How an attached process ended, and who could tell: the kernel's process events (the
    exit status its parent reads), or the process itself (its last line as it went), or
    nobody (an attached process is not hicache's child: its status is its parent's)."""

    how: str = field_spec(required=True, default="")  # exited | killed | unknown
    exit_code: int | None = None  # exited: its code, where known
    signal: str | None = None  # killed: the signal's name
    told_by: str = ""  # kernel | process | nobody
    note: str | None = None  # what the process said, or why nothing could tell

    def short(self) -> str:
        """`exited with code 0`, `killed by SIGABRT`, `exited`, `ended, how unknown`."""
        if self.how == "killed":
            return f"killed by {self.signal}"
        if self.how == "exited":
            return "exited" + (f" with code {self.exit_code}" if self.exit_code is not None else "")
        return "ended, how unknown"

    def text(self) -> str:
        """`exited with code 0 (the kernel's process events)`, `killed by SIGABRT (...)`."""
        what = self.short()
        source = {"kernel": "the kernel's process events", "process": "its own last words"}.get(self.told_by)
        detail = "; ".join(x for x in (source, self.note) if x)
        return f"{what} ({detail})" if detail else what


@dataclass(frozen=True)
class AttachedPid(Record):
    """One process hicache tried to attach to: how it went, and its census."""

    pid: int = field_spec(required=True, default=0)
    name: str = ""  # its command name (comm)
    rank: int | None = None  # its torch.distributed rank
    state: str = ""  # refused | detached | failed | unanswered (had not run the injected text when hicache stopped)
    reason: str | None = None  # why refused or failed
    method: str | None = None  # gdb | sys.remote_exec
    inject_s: float | None = None  # the debugger's run (with gdb, the process is stopped for most of it)
    census_s: float | None = None  # from the agent's start to its census written
    works: int | None = None  # Works the census found at attach (None: no census)
    works_end: int | None = None  # and at detach
    holders: list[HolderCount] = field(default_factory=list)  # most held first
    cost: CensusCost | None = None
    detach_reason: str | None = None
    leftovers: list[str] = field(default_factory=list)  # what detaching could not undo
    ended: ProcessEnd | None = None  # how it ended while attached (None: it ran on, or was never attached)
    polled_before: PolledBefore | None = None  # its polls of the Works it held at attach

    def holder_line(self) -> str | None:
        """The top holder's line, and where the program polls the Works it held at attach:
        `` `Shipper.pending` holds 3,269 Works, 0 completed (+2,018 while attached), polled
        with is_completed() at reap.py:38 in <module>: 2,018 polls, none True``."""
        top = self.top
        if top is None:
            return None
        return top.line() + (f", {self.polled_before.text()}" if self.polled_before is not None else "")

    @property
    def top(self) -> HolderCount | None:
        """The holder that grew most while attached, else the one holding most."""
        if not self.holders:
            return None
        return max(self.holders, key=lambda h: (h.growth or 0, h.held))
