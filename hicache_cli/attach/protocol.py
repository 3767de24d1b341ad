"""What `hicache attach` and the code it injects into a running process agree on.

Both sides import this module: hicache, and the agent inside the target (next to the
target's own packages), so it is stdlib only. The run directory stays the one contract,
split by who may write where (docs/security.md, "Attaching"): hicache owns the run
directory; the agents write only in its subdirectory `agent/`, which hicache makes and
hands to the targets' user. Per attached process, hicache writes the bootstrap's arguments
into the injected text and the agent answers with files:

- `agent/attach-<pid>.json`: the agent's status (AgentStatus), rewritten at each step:
  refused (and why), attached (its rank and rank file), detached;
- `agent/census-<pid>.json`: the census of the Works the process held (Census), taken as
  soon as it attached; `agent/census-<pid>-end.json` is the one taken when it detaches;
- `agent/rank-<N>.jsonl`: samples, exactly as `hicache trace` writes them (tracer/session.py);
- `attach-stop` (written by hicache): every agent detaches (its probe's stop file too, so
  the probe writes its final line);
- `attach-<pid>.cancel` (written by hicache): it stopped waiting for that process to run the
  injected text; if the process ever does, it refuses.

hicache reads what an agent wrote as another user's files: never through a link, never a
FIFO or device, only a regular file of the agent's user with one link, bounded in size.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Collection, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from hicache_cli.files import read_bytes, replace_file
from hicache_cli.protocol import AGENT_DIR  # boot.py spells it too: it imports nothing of hicache
from hicache_cli.records import ShapeError, parse

T = TypeVar("T")

# The tracer and the agent are hicache's own modules, imported by the target's Python:
# the oldest Python they run on is the project's (pyproject requires-python); the
# bootstrap itself is written for any Python 3 so that an older one is refused in words.
MIN_PYTHON = (3, 10)
STOP_FILE = "attach-stop"
STATUS_GLOB = "attach-*.json"
AGENT_NAME = "__hicache_attach__"  # the bootstrap's module name inside the target
THREAD_NAME = "hicache-attach"

# AgentStatus.state
REFUSED = "refused"
ATTACHED = "attached"
DETACHED = "detached"
FAILED = "failed"  # attached, then the agent itself failed (it detached what it could)

# AgentStatus.reason when refused: torch.distributed's two ways of not being there
NO_TORCH = "torch is not imported"
NO_GROUP = "torch.distributed has no process group initialised"


JSON_LIMIT = 64 << 20  # a status or census file larger than this is not an agent's


def agent_dir(run_dir: Path) -> Path:
    return run_dir / AGENT_DIR


def status_file(run_dir: Path, pid: int) -> Path:
    return agent_dir(run_dir) / f"attach-{pid}.json"


def cancel_file(run_dir: Path, pid: int) -> Path:
    """hicache stopped waiting for `pid` to run the injected text: if it ever does, it refuses."""
    return run_dir / f"attach-{pid}.cancel"


def census_file(run_dir: Path, pid: int, when: str = "start") -> Path:
    return agent_dir(run_dir) / (f"census-{pid}.json" if when == "start" else f"census-{pid}-{when}.json")


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Readers never see half a file: written under a fresh name made exclusively beside it
    (never through a link someone put there), then renamed over it; 0600."""
    replace_file(path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode("utf-8"))


def read_json(path: Path, owners: Collection[int] | None = None) -> dict[str, Any] | None:
    """An agent's JSON file: None while it is not there or not whole JSON yet. Something that
    is not an agent's file (a link, a FIFO, a device, another user's file or a hard link with
    `owners`, over JSON_LIMIT) raises files.Refused or OSError, naming it: never read, never
    waited on."""
    try:
        data = json.loads(read_bytes(path, follow=False, limit=JSON_LIMIT, owners=owners))
    except FileNotFoundError:
        return None
    except (ValueError, RecursionError):  # torn, or not JSON at all
        return None
    return data if isinstance(data, dict) else None


def typed(cls: type[T], data: Mapping[str, Any], where: str) -> T:
    """One of this module's dataclasses from what an agent wrote, each known field checked
    against its type (records.parse); unknown keys ignored. ShapeError names a wrong field."""
    hints = typing.get_type_hints(cls)
    known = {f.name: parse(data[f.name], hints[f.name], f"{where}.{f.name}") for f in fields(cls) if f.name in data}
    try:
        return cls(**known)
    except TypeError:
        missing = [f.name for f in fields(cls) if f.name not in data and f.default is f.default_factory is MISSING]
        raise ShapeError(f"{where}: {', '.join(missing)} missing") from None


@dataclass
class BootArgs:
    """What the bootstrap needs, written into the injected text as a dict literal."""

    run_dir: str
    root: str  # the directory holding the hicache_cli package, put on sys.path for the import
    owner: str  # lifecycle.owner_token of hicache: the agent detaches when it is gone
    hz: float = 10.0
    census: bool = True
    tracer: bool = True
    # hicache attach --follow: a census every follow_s, the tracer on for window_s only when a holder grows
    follow_s: float | None = None
    window_s: float = 10.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class AgentStatus:
    """What an agent says about itself (attach-<pid>.json)."""

    pid: int
    state: str
    reason: str | None = None  # why refused or failed
    python: str = ""  # the target's sys.version, first word
    rank: int | None = None
    world_size: int | None = None
    rank_file: str | None = None  # the rank-N.jsonl its samples go to
    attached_at: float | None = None  # time.time()
    detached_at: float | None = None
    detach_reason: str | None = None
    leftovers: list[str] = field(default_factory=list)  # what detaching could not undo
    # the program's polls of Works made before the attach: {file, line, function, polls, true}
    polled_before: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "status") -> AgentStatus:
        return typed(cls, data, where)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Holder:
    """One container (or one kind of container) holding Works, named by the path that
    reaches it: `Syncer.pending`, `module.GLOBAL`, `make.<locals>.works`,
    `Scheduler.pending[<int>]`, `Backend.ongoing_reqs[*].handle`."""

    path: str
    container: str  # the type of the object that holds the Works directly: list, dict, Record...
    works: int
    completed: int  # of those, how many said is_completed() == True
    containers: int = 1  # how many such containers (a Record each, say) were grouped here
    tensor_bytes: int | None = None  # tensors held beside the Works in the same containers
    named: bool = True  # False when nothing Python can see names the container
    # a follow's census after a tracer window: where its Works were made, [file, line, function, works]
    sites: list[list[Any]] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "holder") -> Holder:
        return typed(cls, data, where)


@dataclass
class CensusCost:
    """What the census cost the process: its longest hold of the GIL and its total."""

    objects: int = 0  # objects the garbage collector tracks (the walk's size)
    snapshot_s: float = 0.0  # the GIL held taking them (heap.py): one hold, or chunks on a big heap
    frozen: int = 0  # of them, objects gc.freeze() had moved out of the collector's generations
    unseen: str = ""  # why objects the collector tracks were left out of the census, if any were
    walk_s: float = 0.0  # wall time of the chunked walks (passes), pauses between included
    busy_s: float = 0.0  # time the walks held the GIL
    max_hold_s: float = 0.0  # the longest single hold (the snapshot included)
    chunks: int = 0
    passes: int = 0
    truncated: bool = False  # the budget ran out: the census is partial
    cpu_s: float = 0.0  # CPU time of the agent's thread over the whole census (walks, naming, counting)
    max_hold_cpu_s: float = 0.0  # the CPU time of the longest hold by that measure (less when the OS preempted it)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "cost") -> CensusCost:
        return typed(cls, data, where)

    @property
    def pause_per_million_s(self) -> float:
        """The GIL held per million tracked objects (snapshot + walks)."""
        return (self.snapshot_s + self.busy_s) * 1e6 / max(1, self.objects)


@dataclass
class Census:
    """Every live Work the process's Python objects hold, by holder, largest first."""

    pid: int
    rank: int | None
    taken_at: float  # time.time()
    works: int  # Works found (held by a container Python can see)
    holders: list[Holder]
    cost: CensusCost
    when: str = "start"  # "start" (on attaching) or "end" (on detaching)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "census") -> Census:
        return typed(cls, {"taken_at": 0.0, "works": 0, "holders": [], "cost": {}, **data}, where)
