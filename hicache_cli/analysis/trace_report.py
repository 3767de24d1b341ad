"""What a traced process's samples say about its Works: the report's `works` object, and
the one line that names where a leak comes from. Pure functions over samples."""

from __future__ import annotations

import os
from typing import Any

from hicache_cli.series import Totals


def works_summary(totals: Totals) -> dict[str, Any] | None:
    """created/waited/completed/dropped, live at the end and at most, and the creation
    sites sorted by live Works (from the last sample that carried them)."""
    if totals.last_works is None:
        return None
    last = totals.last_works
    sites = totals.last_sites or []
    return {
        "created": last.get("created", 0),
        "waited": last.get("waited", 0),
        "completed": last.get("completed", 0),
        "dropped": last.get("dropped", 0),
        "live_final": last.get("live", 0),
        "live_max": totals.live_max,
        "sites": sorted(sites, key=lambda s: (-s.get("live", 0), -s.get("live_max", 0), -s.get("created", 0))),
    }


def site_text(site: dict[str, Any]) -> str:
    """`leaky.py:42 in sync_counts (isend to rank 1)`."""
    where = f"{os.path.basename(site['file'])}:{site['line']}"
    if site.get("function"):
        where += f" in {site['function']}"
    peer = site.get("peer")
    op = site.get("op") or "?"
    direction = "from" if "recv" in op and "isend" not in op else "to"
    return f"{where} ({op}{'' if peer is None else f' {direction} rank {peer}'})"


def top_site_line(works: dict[str, Any] | None) -> str | None:
    """The sentence that ends a leak hunt, or None when no site ever held a live Work."""
    if not works or not works["sites"]:
        return None
    top = works["sites"][0]
    if top.get("live", 0) > 0:
        return f"{top['live']} live Works created at {site_text(top)}, never waited"
    if top.get("live_max", 0) > 1:  # released by the end (the program exited), not waited
        return f"up to {top['live_max']} live Works created at {site_text(top)}, never waited, released at the end"
    return None
