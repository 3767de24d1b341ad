"""The words a judgement is made of, spelled once: a rank's (and a run's) verdict, how a run
ended, and what kind of failure a rank had. `str` enums: they compare equal to the JSON's
strings and print as them. Pure and stdlib only.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class Text(str, enum.Enum):
    """A str enum that prints and formats as its value."""

    __str__ = str.__str__
    __format__ = str.__format__


class Verdict(Text):
    LEAK = "LEAK"
    BOUNDED = "BOUNDED"
    INCONCLUSIVE = "INCONCLUSIVE"

    @classmethod
    def overall(cls, verdicts: Iterable[str | None]) -> Verdict:
        """A run's: one leaking rank makes a leak; bounded only when every rank is (a rank
        without a verdict yet keeps the rest from being called bounded)."""
        seen = list(verdicts)
        if cls.LEAK in seen:
            return cls.LEAK
        if seen and all(v == cls.BOUNDED for v in seen):
            return cls.BOUNDED
        return cls.INCONCLUSIVE

    @property
    def decided(self) -> bool | None:
        """What a gate makes of it: True bounded, False leaking, None undecided."""
        return {Verdict.BOUNDED: True, Verdict.LEAK: False}.get(self)


class CauseKind(Text):
    """Why a traced process's memory grows (analysis/causes.py)."""

    WORKS = "works"  # live Works keep growing: the site that makes them
    DROPPED = "dropped"  # point-to-point Works dropped unwaited, while memory grows: their rate and site
    BACKLOG = "backlog"  # messages to a peer pile up faster than it receives them
    MEMORY = "memory"  # neither: memory grows, not from Works or messages


class Status(Text):
    COMPLETED = "completed"  # every rank ran to its deadline (or the program to its end)
    FAILED = "failed"  # see Report.failures
    INTERRUPTED = "interrupted"  # a stop signal; the report holds what was measured until then


class FailureKind(Text):
    ERROR = "error"  # the rank raised: its final line says what
    CRASH = "crash"  # it ended without its final line (a signal, an exit)
    STALL = "stall"  # its round ran longer than the stall timeout
    HANG = "hang"  # its probe stopped sampling
    TIMEOUT = "timeout"  # still running when the launcher's deadline came

    @property
    def stuck(self) -> bool:
        return self in (FailureKind.STALL, FailureKind.HANG)
