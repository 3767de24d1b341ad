"""What a traced process's samples say about its Works: the report's `works` record, and
the one line that names where a leak comes from. Pure functions over samples."""

from __future__ import annotations

import os
import re

from hicache_cli.analysis.results import Site, Works
from hicache_cli.records import ShapeError
from hicache_cli.series import Totals


def works_summary(totals: Totals) -> Works | None:
    """created/waited/completed/dropped, live at the end and at most, and the creation
    sites sorted by live Works (from the last sample that carried them)."""
    if totals.last_works is None:
        return None
    last = totals.last_works
    sites = read_sites(totals.last_sites or [])
    return Works(
        created=last.get("created", 0),
        waited=last.get("waited", 0),
        completed=last.get("completed", 0),
        dropped=last.get("dropped", 0),
        live_final=totals.live_last,
        live_max=totals.live_max,
        sites=sorted(sites, key=lambda s: (-s.live, -s.live_max, -s.created)),
    )


def read_sites(raw: list[object]) -> list[Site]:
    """A sample's sites as records (a site a foreign program's tracer mangled is left out)."""
    return [site for item in raw if (site := _site(item)) is not None]


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
    direction = "from" if _p2p(op) == "recv" else "to"
    return f"{where} ({op}{'' if site.peer is None else f' {direction} rank {site.peer}'})"


# The ops whose Works never turn complete by themselves on gloo: measured on torch 2.13 (a
# send's and a receive's is_completed() stayed False for 0.5 s after the message had passed,
# True after wait(); an async collective's turned True by itself). doctor measures the send.
STAYS_INCOMPLETE_ON = {"gloo": frozenset({"send", "recv"})}


def poll_text(site: Site) -> str | None:
    """`polled with is_completed() at reaper.py:31 in reap, which stays False on gloo until
    wait()`: why a site's Works stayed live although the program looks at them; None when
    the program never polled them. The last clause only where the tracer saw no poll come
    true and the backend is one where that op's Works never complete by themselves."""
    if site.polled is None:
        return None
    poll = site.polled
    text = f"polled with is_completed() at {os.path.basename(poll.file)}:{poll.line}"
    text += f" in {poll.function}" if poll.function else ""
    stays = STAYS_INCOMPLETE_ON.get(site.backend or "", frozenset())
    if site.completed == 0 and site.op and _p2p(site.op) in stays:
        text += f", which stays False on {site.backend} until wait()"
    return text


def _p2p(op: str) -> str | None:
    """send or recv, for a point-to-point op (`isend`, `batch_isend_irecv(irecv)`); else None."""
    call = op[op.index("(") + 1 : -1] if op.endswith(")") else op  # a batch's own op
    if call in ("recv", "irecv", "recv_anysource"):
        return "recv"
    return "send" if call in ("send", "isend") else None


def top_site_line(works: Works | None) -> str | None:
    """The sentence that ends a leak hunt, or None when no site ever held a live Work."""
    if not works or not works.sites:
        return None
    top = works.sites[0]
    polled = poll_text(top)
    why = f": {polled}" if polled else ""
    if top.live > 0:
        return f"{top.live} live Works created at {site_text(top)}, never waited{why}"
    if top.live_max > 1:  # released by the end (the program exited), not waited
        return f"up to {top.live_max} live Works created at {site_text(top)}, never waited, released at the end{why}"
    return None


NOTHING_TRACED = "no process of the program started a torch.distributed process group"
_PYTHON = re.compile(r"(python|pypy)[0-9.]*")
# Flags of the interpreter that keep hicache's tracer out (docs/trace.md, Limits): it is
# loaded by sitecustomize from PYTHONPATH. -E ignores PYTHON* variables, -I implies -E, -S
# skips the site module that imports sitecustomize.
_UNTRACEABLE = {
    "I": "-I, which ignores PYTHONPATH",
    "E": "-E, which ignores PYTHONPATH",
    "S": "-S, which skips the site module",
}
_TAKES_VALUE = "cmWX"  # the rest of the cluster (or the next argument) is that flag's value


def untraceable_flag(command: list[str]) -> str | None:
    """Why a `python ...` command line cannot be traced (`-I, which ignores PYTHONPATH`), or None:
    only the interpreter's own flags, before its script, -c or -m, count."""
    if not command or not _PYTHON.fullmatch(os.path.basename(command[0])):
        return None
    args = iter(command[1:])
    for arg in args:
        if arg == "--" or arg == "-" or not arg.startswith("-"):
            return None  # the script (or stdin): its own arguments follow
        if arg.startswith("--"):
            continue  # no long option keeps the tracer out
        for at, flag in enumerate(arg[1:], start=2):
            if flag in _UNTRACEABLE:
                return _UNTRACEABLE[flag]
            if flag in _TAKES_VALUE:
                if flag in "cm":
                    return None  # the program follows
                if at == len(arg):
                    next(args, None)  # -W ignore: the value is the next argument
                break  # -Wignore: the value is the rest of this one
    return None


def nothing_traced(command: list[str]) -> str:
    """The line for a trace whose program never started a process group, naming the
    documented limit when the command line shows it (`python -I`)."""
    flag = untraceable_flag([str(a) for a in command])
    if flag is None:
        return NOTHING_TRACED
    return f"{NOTHING_TRACED}: the program runs python {flag}, so hicache's tracer never loads (docs/trace.md, Limits)"
