"""What the boot sitecustomize calls when a watched module has just been imported.

- torch.distributed's core module: `init_process_group` is wrapped (before anything can
  import it by name); the first call patches the Work hooks and starts this process's
  session. The torchrun agent and any process that never starts a group stop there.
- the `--loop` module: the named function is wrapped so that each call is a round.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from types import ModuleType
from typing import Any

from hicache_cli.rank.loop_stats import RING_MASK, LoopStats
from hicache_cli.tracer import works
from hicache_cli.tracer.protocol import TraceEnv
from hicache_cli.tracer.session import Session

C10D = "torch.distributed.distributed_c10d"


class _State:
    """This process's tracer: made at import, reset in a forked child."""

    def __init__(self) -> None:
        self.env = TraceEnv.from_environ()
        self.table: works.WorkTable | None = None
        self.session: Session | None = None
        self.loop = LoopStats()


STATE = _State()


def _forked() -> None:
    """A forked child is a new process: its own table and session, if it starts a group."""
    STATE.session = None
    STATE.loop = LoopStats()
    if STATE.table is not None:
        STATE.table.reset()  # emptied in place: the patches keep pointing at it


os.register_at_fork(after_in_child=_forked)


def imported(module: ModuleType) -> None:
    if STATE.env is None:
        return
    if module.__name__ == C10D:
        wrap_init(module)
    if STATE.env.loop and module.__name__ == STATE.env.loop.split(":", 1)[0]:
        wrap_loop(module, STATE.env.loop.split(":", 1)[1], STATE)


def wrap_init(c10d: ModuleType) -> None:
    original = c10d.init_process_group
    if getattr(original, "__hicache_traced__", False):
        return

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        arm_works(c10d)
        result = original(*args, **kwargs)
        start_session(c10d)
        return result

    init_process_group.__hicache_traced__ = True  # type: ignore[attr-defined]
    c10d.init_process_group = init_process_group


def arm_works(c10d: ModuleType) -> works.WorkTable:
    if STATE.table is None:
        torch_dir = os.path.dirname(sys.modules["torch"].__file__) + os.sep
        STATE.table = works.WorkTable(skip_prefixes=(torch_dir,))
        works.install(STATE.table, c10d.ProcessGroup, c10d.Work, c10d.get_global_rank)
    return STATE.table


def start_session(c10d: ModuleType) -> None:
    if STATE.session is not None or STATE.env is None or STATE.table is None:
        return
    try:
        STATE.session = Session(
            STATE.env, STATE.table, STATE.loop, c10d.get_rank(), c10d.get_world_size(), world=world_of(c10d)
        )
    except OSError as exc:  # the run directory went away: trace nothing, run on
        sys.stderr.write(f"hicache trace: not observing pid {os.getpid()}: {exc}\n")


def world_of(c10d: ModuleType) -> str | None:
    """Where the default process group met: its store's address (`tcp://host:port`) or file
    (`file:///path`), the same for every member of one world and different for another world
    on the machine (forkserver workers that form their own group). None when it cannot be told
    (a store of another kind)."""
    try:
        store = c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):
        return None
    for _ in range(8):  # PrefixStores wrap it, one per prefix
        inner = getattr(store, "underlying_store", None)
        if inner is None:
            break
        store = inner
    host, port = getattr(store, "host", None), getattr(store, "port", None)
    if isinstance(host, str) and isinstance(port, int):
        return f"tcp://{host}:{port}"
    path = getattr(store, "path", None)
    return f"file://{path}" if isinstance(path, str) else None


def wrap_loop(module: ModuleType, qualname: str, state: _State) -> None:
    """Make each call of MODULE:QUALNAME a round of the loop: its latency, its age."""
    owner: Any = module
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    raw = owner.__dict__[name] if name in getattr(owner, "__dict__", {}) else getattr(owner, name)
    kind = type(raw) if isinstance(raw, (staticmethod, classmethod)) else None
    function = raw.__func__ if kind else raw
    clock = time.perf_counter

    @functools.wraps(function)
    def round_(*args: Any, **kwargs: Any) -> Any:
        stats = state.loop
        if stats.thread is None:
            stats.thread = threading.get_ident()
        began = clock()
        stats.round_started = began
        stats.in_round += 1
        try:
            return function(*args, **kwargs)
        finally:
            stats.in_round -= 1
            stats.latency_ring[stats.rounds & RING_MASK] = clock() - began
            stats.rounds += 1

    setattr(owner, name, kind(round_) if kind else round_)
