"""What a traced process's samples say about its Works: the report's `works` record, and
the one line that names where a leak comes from. Pure functions over samples."""

from __future__ import annotations

import os

from hicache_cli.analysis.results import Site, Works
from hicache_cli.records import ShapeError
from hicache_cli.series import Totals


def works_summary(totals: Totals) -> Works | None:
    """created/waited/completed/dropped, live at the end and at most, and the creation
    sites sorted by live Works (from the last sample that carried them)."""
    if totals.last_works is None:
        return None
    last = totals.last_works
    sites = [site for raw in totals.last_sites or [] if (site := _site(raw)) is not None]
    return Works(
        created=last.get("created", 0),
        waited=last.get("waited", 0),
        completed=last.get("completed", 0),
        dropped=last.get("dropped", 0),
        live_final=last.get("live", 0),
        live_max=totals.live_max,
        sites=sorted(sites, key=lambda s: (-s.live, -s.live_max, -s.created)),
    )


def _site(raw: object) -> Site | None:
    """A site as the tracer wrote it in a sample (tracer/works.py: Site.to_json)."""
    try:
        return Site.from_dict(raw)
    except ShapeError:
        return None  # a line a foreign program's tracer mangled: that site is left out


def site_text(site: Site) -> str:
    """`leaky.py:42 in sync_counts (isend to rank 1)`."""
    where = f"{os.path.basename(site.file)}:{site.line}"
    if site.function:
        where += f" in {site.function}"
    op = site.op or "?"
    direction = "from" if "recv" in op and "isend" not in op else "to"
    return f"{where} ({op}{'' if site.peer is None else f' {direction} rank {site.peer}'})"


def top_site_line(works: Works | None) -> str | None:
    """The sentence that ends a leak hunt, or None when no site ever held a live Work."""
    if not works or not works.sites:
        return None
    top = works.sites[0]
    if top.live > 0:
        return f"{top.live} live Works created at {site_text(top)}, never waited"
    if top.live_max > 1:  # released by the end (the program exited), not waited
        return f"up to {top.live_max} live Works created at {site_text(top)}, never waited, released at the end"
    return None
