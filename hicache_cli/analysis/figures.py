"""Figures shown in more than one place (the report, `report show`, the dashboard), each
computed by one formula here. Pure."""

from __future__ import annotations

from hicache_cli.sample import Sample


def rounds_per_s(last: Sample) -> float | None:
    """A rank's rounds per second of workload so far, from its latest sample: the report's
    `rounds_per_s` and the dashboard's `rnd/s` (its last frame shows what the report says)."""
    return round(last.rounds / last.t, 1) if last.t > 0 else None
