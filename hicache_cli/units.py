"""Parsing durations and sizes the way users type them."""

from __future__ import annotations

import math
import re

from hicache_cli.errors import UsageError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")
_SCALE = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}

# Past these a value is a typo, not a plan. They also keep every deadline hicache derives
# (duration + grace, now + timeout) finite and far inside what timers and sleeps accept.
# A week is the longest soak anyone has asked for (at 10 Hz, 6 M samples per rank): it
# bounds what a run lasts (--duration, --max-duration, --warmup, which lies inside it).
MAX_RUN_S = 7 * 86400.0
# One scheduler round, or one round's drain, lasting an hour is a hang by any measure:
# it bounds --stall-timeout and --wait-timeout.
MAX_TIMEOUT_S = 3600.0


def parse_duration(text: str, option: str = "duration", maximum: float = MAX_RUN_S) -> float:
    """'15s', '2m', '500ms', '1h' or plain seconds -> seconds (more than zero, at most `maximum`)."""
    match = _DURATION.match(str(text))
    if not match and str(text).strip().startswith("-"):
        raise UsageError(f"--{option}: must be more than zero, got {text!r}")
    if not match:
        raise UsageError(f"--{option}: cannot read {text!r} as a duration (use e.g. 15s, 2m, 500ms or seconds)")
    seconds = float(match.group(1)) * _SCALE[match.group(2)]
    if math.isnan(seconds) or seconds <= 0:
        raise UsageError(f"--{option}: must be more than zero, got {text!r}")
    if seconds > maximum:  # inf included
        raise UsageError(f"--{option}: {text!r} is longer than the most allowed, {format_limit(maximum)}")
    return seconds


def format_limit(seconds: float) -> str:
    """A limit in the largest whole unit: '7 days', '1 hour'."""
    for unit, size in (("day", 86400.0), ("hour", 3600.0), ("minute", 60.0)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds:g} s"


def format_duration(seconds: float) -> str:
    if seconds >= 120:
        return f"{seconds / 60:.1f}m"
    return f"{seconds:.1f}s"


def format_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_bytes_short(n: float | None) -> str:
    """At most 6 characters: 240.8M, 12K, 1.2G."""
    if n is None:
        return "n/a"
    sign, n = ("-" if n < 0 else ""), abs(n)
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{sign}{n:.0f}{unit}" if unit in ("B", "K") or n >= 100 and unit == "G" else f"{sign}{n:.1f}{unit}"
        n /= 1024
    raise AssertionError("unreachable")


_RATE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:(k|m|g)?(b)\s*/\s*(s|min|m|h))?\s*$", re.IGNORECASE)
_BYTES = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}
_PER_HOUR = {"s": 3600.0, "min": 60.0, "m": 60.0, "h": 1.0, None: 1.0}


def parse_rate_mb_per_h(text: str, option: str) -> float:
    """'200MB/h', '1.5GB/h', '100KB/s', '200' (MB/h) -> MB (10^6 bytes) per hour, positive."""
    match = _RATE.match(str(text))
    if not match:
        raise UsageError(f"--{option}: cannot read {text!r} as a rate (use e.g. 200MB/h, 1GB/h, 50KB/s)")
    value = float(match.group(1))
    if match.group(3) is None:  # a bare number is MB/h
        mb_per_h = value
    else:
        mb_per_h = value * _BYTES[(match.group(2) or "").lower()] / 1e6 * _PER_HOUR[match.group(4).lower()]
    if not math.isfinite(mb_per_h):
        raise UsageError(f"--{option}: {text!r} is too large")
    if mb_per_h <= 0:
        raise UsageError(f"--{option}: must be more than zero, got {text!r}")
    return mb_per_h
