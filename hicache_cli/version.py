"""hicache's own version, read once from the installed distribution (pyproject.toml's)."""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "hicache"


def hicache_version() -> str | None:
    """The installed hicache's version; None for a source tree that was never installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


__version__: str = hicache_version() or "unknown"
