"""Faults to inject into ranks, in the shapes the fix's open risks take.

    lag:RANK:MS            the rank sleeps MS milliseconds every round (a slow stage)
    stall:RANK:AT:FOR      from AT into the run, the rank stops (and so stops receiving) for FOR
    hang:RANK:AT           from AT, the rank stops for good (a receiver that never receives)
    kill:RANK:AT           at AT, the rank SIGKILLs itself (a crashed stage)
    raise-in-wait:RANK:AT  from AT, the rank's next wait() on a send raises
    keep:RANK:K            the rank keeps every K-th released Work forever (an injected leak
                           of known size, for measuring what the verdicts can detect)

Times are durations such as 4s, 500ms, 1m or plain seconds; MS is milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# kind -> how it is written: the one list of kinds (help texts and messages are made from it)
SHAPES = {
    "lag": "lag:RANK:MS",
    "stall": "stall:RANK:AT:FOR",
    "hang": "hang:RANK:AT",
    "kill": "kill:RANK:AT",
    "raise-in-wait": "raise-in-wait:RANK:AT",
    "keep": "keep:RANK:K",
}
KINDS = tuple(SHAPES)
_ARITY = {"lag": 1, "stall": 2, "hang": 1, "kill": 1, "raise-in-wait": 1, "keep": 1}
_DURATION = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)(ms|s|m)?$")
_SCALE = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}


class FaultSpecError(ValueError):
    pass


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    at_s: float = 0.0  # seconds into the run (lag: from the start)
    for_s: float | None = None  # stall: how long
    lag_s: float = 0.0  # lag: per round
    every: int = 0  # keep: every K-th released Work is kept
    spec: str = ""  # as the user wrote it

    def __str__(self) -> str:
        return self.spec or self.kind


def _seconds(text: str, spec: str, default_unit: str | None = None) -> float:
    match = _DURATION.match(text.strip())
    if not match:
        raise FaultSpecError(f"fault {spec!r}: cannot read {text!r} as a time (use e.g. 4s, 500ms)")
    return float(match.group(1)) * _SCALE[match.group(2) or default_unit]


def parse_fault(spec: str, world_size: int) -> Fault:
    """Parse one --fault; FaultSpecError says what is wrong in one line."""
    parts = spec.strip().split(":")
    kind = parts[0]
    if kind not in KINDS:
        raise FaultSpecError(f"fault {spec!r}: unknown kind {kind!r}; choose one of: {', '.join(KINDS)}")
    if len(parts) != 2 + _ARITY[kind]:
        raise FaultSpecError(f"fault {spec!r}: expected {SHAPES[kind]}")
    if not (parts[1].isascii() and parts[1].isdigit()):
        raise FaultSpecError(f"fault {spec!r}: rank {parts[1]!r} is not a number")
    rank = int(parts[1])
    if rank >= world_size:
        raise FaultSpecError(f"fault {spec!r}: there is no rank {rank} (ranks are 0-{world_size - 1})")
    if kind == "lag":
        return Fault(kind, rank, lag_s=_seconds(parts[2], spec, default_unit="ms"), spec=spec)
    if kind == "keep":
        if not (parts[2].isascii() and parts[2].isdigit()) or int(parts[2]) < 1:
            raise FaultSpecError(f"fault {spec!r}: K must be a whole number of at least 1")
        return Fault(kind, rank, every=int(parts[2]), spec=spec)
    at = _seconds(parts[2], spec)
    if kind == "stall":
        return Fault(kind, rank, at_s=at, for_s=_seconds(parts[3], spec), spec=spec)
    return Fault(kind, rank, at_s=at, spec=spec)


@dataclass
class FaultPlan:
    """The faults of one rank, fired by the rank's loop as run time passes."""

    faults: list[Fault]

    @classmethod
    def for_rank(cls, specs: list[str], rank: int, world_size: int) -> FaultPlan:
        return cls([f for f in (parse_fault(s, world_size) for s in specs) if f.rank == rank])

    @property
    def lag_s(self) -> float:
        return sum(f.lag_s for f in self.faults if f.kind == "lag")

    @property
    def keep_every(self) -> int:
        """0, or K of the keep fault (the smallest, if given twice)."""
        return min((f.every for f in self.faults if f.kind == "keep"), default=0)

    @property
    def timed(self) -> list[Fault]:
        """The faults that fire at a time (not lag or keep), not yet fired."""
        return [f for f in self.faults if f.kind not in ("lag", "keep")]

    def due(self, run_t: float) -> list[Fault]:
        """Timed faults whose time has come; each is returned once."""
        ready = [f for f in self.timed if f.at_s <= run_t]
        if ready:
            self.faults = [f for f in self.faults if f not in ready]
        return ready
