"""`@pytest.mark.hicache_ranks(...)`: its arguments, read and checked once (pure).

A bad argument is one line naming it, raised as MarkerError; the plugin fails the test
with that line (never a traceback from inside hicache).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hicache_cli.errors import UsageError
from hicache_cli.units import MAX_TIMEOUT_S, parse_duration, parse_rate_mb_per_h

MARKER = "hicache_ranks"
GIVEN = ("rank", "world_size")  # the body's arguments each rank passes itself: never fixtures
MAX_WORLD_SIZE = 64  # processes on one machine; past this a value is a typo, not a plan
DEFAULT_MAX_LIVE_WORKS = 16
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_PROBE_HZ = 10.0
DOC = (
    f"{MARKER}(world_size, max_live_works={DEFAULT_MAX_LIVE_WORKS}, backend='gloo', timeout='60s', "
    "max_rss_slope=None, allow_unwaited_sends=False): run the test once in each of world_size processes "
    "with a process group (rank and world_size as arguments) and the Work tracer on; fail when a rank holds "
    "more than max_live_works Works it never waited, or returns with sends it never waited (hicache)"
)


class MarkerError(ValueError):
    """A marker argument hicache cannot use; the message is the whole story."""


@dataclass(frozen=True)
class RanksSpec:
    world_size: int
    max_live_works: int | None = DEFAULT_MAX_LIVE_WORKS  # None: counted and reported, not checked
    backend: str = "gloo"
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_rss_slope_mb_per_h: float | None = None  # None: the RSS trend is reported, not checked
    probe_hz: float = DEFAULT_PROBE_HZ
    allow_unwaited_sends: bool = False  # a body may return with sends it never waited (reported, not failed)


def spec_from_marker(args: tuple[Any, ...], kwargs: dict[str, Any]) -> RanksSpec:
    """The marker's positional and keyword arguments -> a checked RanksSpec."""
    known = ("world_size", "max_live_works", "backend", "timeout", "max_rss_slope", "allow_unwaited_sends")
    if len(args) > 1:
        raise MarkerError(f"{MARKER}: give world_size as the only positional argument, got {len(args)} of them")
    unknown = sorted(set(kwargs) - set(known))
    if unknown:
        raise MarkerError(f"{MARKER}: unknown argument {unknown[0]!r} (known: {', '.join(known)})")
    if args and "world_size" in kwargs:
        raise MarkerError(f"{MARKER}: world_size given twice")
    if not args and "world_size" not in kwargs:
        raise MarkerError(f"{MARKER}: name the number of ranks, e.g. @pytest.mark.{MARKER}(2)")
    world_size = args[0] if args else kwargs["world_size"]
    return RanksSpec(
        world_size=_world_size(world_size),
        max_live_works=_max_live_works(kwargs.get("max_live_works", DEFAULT_MAX_LIVE_WORKS)),
        backend=_backend(kwargs.get("backend", "gloo")),
        timeout_s=_timeout(kwargs.get("timeout", DEFAULT_TIMEOUT_S)),
        max_rss_slope_mb_per_h=_rss_slope(kwargs.get("max_rss_slope")),
        allow_unwaited_sends=_flag(kwargs.get("allow_unwaited_sends", False), "allow_unwaited_sends"),
    )


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise MarkerError(f"{MARKER}: {name} must be True or False, got {value!r}")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _world_size(value: Any) -> int:
    if not _is_int(value) or not 1 <= value <= MAX_WORLD_SIZE:
        raise MarkerError(f"{MARKER}: world_size must be a whole number from 1 to {MAX_WORLD_SIZE}, got {value!r}")
    return value


def _max_live_works(value: Any) -> int | None:
    if value is None:
        return None
    if not _is_int(value) or value < 0:
        raise MarkerError(f"{MARKER}: max_live_works must be a whole number >= 0 (or None), got {value!r}")
    return value


def _backend(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise MarkerError(f"{MARKER}: backend must name a torch.distributed backend, e.g. 'gloo', got {value!r}")
    return value.strip()


def _timeout(value: Any) -> float:
    if _is_int(value) or isinstance(value, float):
        if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S):
            raise MarkerError(f"{MARKER}: timeout must be more than 0 s and at most 1 hour, got {value!r}")
        return float(value)
    try:
        return parse_duration(str(value), "timeout", MAX_TIMEOUT_S)
    except UsageError:
        raise MarkerError(
            f"{MARKER}: timeout={value!r} is not a duration from 0 to 1 hour (use e.g. '60s', '2m', or seconds)"
        ) from None


def _rss_slope(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise MarkerError(f"{MARKER}: max_rss_slope must be a rate such as '50MB/h', got {value!r}")
    try:
        return parse_rate_mb_per_h(str(value), "max_rss_slope")
    except UsageError:
        raise MarkerError(
            f"{MARKER}: max_rss_slope={value!r} is not a positive rate (use e.g. '50MB/h', '1GB/h'; a number is MB/h)"
        ) from None
