"""The agent: the thread `hicache attach` runs inside a process it did not start.

boot.py starts it on the program's main thread and returns at once. Here, on its own
thread, the agent:

1. takes the census of the Works the process already holds (census.py), before any hook
   exists, and writes it to the run directory;
2. installs the tracer `hicache trace` uses (tracer/works.py: ProcessGroup methods and
   Work.wait wrapped) and starts its probe (tracer/session.py, as a guest): from then on
   the process writes `rank-N.jsonl` with the Sample contract, new Works by creation site;
   or, following (`attach --follow`), starts the probe alone and takes a census every few
   seconds, the tracer's hooks on only for a window when a holder grows (follow.py);
3. detaches when hicache asks (the stop file) or is gone (its pid, watched by the probe's
   lifeline every half second): the hooks are put back, the weak references dropped, the
   probe's thread ended, the census taken again (when hicache is still there to read it),
   and hicache's modules removed from sys.modules. The program was never stopped or
   signalled, and keeps nothing of hicache once the collector has run.
4. when the program exits while attached, detaches before the interpreter finalizes: the
   program's exit hooks run this agent's last (it registers first), which ends the census if
   one runs and waits for this thread to finish. A daemon thread still running when the
   interpreter finalizes is cut off wherever it next needs the GIL, and cut off inside a
   torch destructor (a Work's, a tensor's, freed by the collector its allocations started)
   it aborts the process: "terminate called without an active exception", SIGABRT.

Stdlib and the program's torch only.
"""

from __future__ import annotations

import atexit
import linecache
import os
import sys
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

from hicache_cli.attach import protocol
from hicache_cli.attach.census import take_census
from hicache_cli.attach.follow import Follower, Hooks
from hicache_cli.attach.protocol import AgentStatus, BootArgs, Census
from hicache_cli.attach.walk import Walker
from hicache_cli.lifecycle import Lifeline
from hicache_cli.protocol import DETACHED_PREFIX, EXITED
from hicache_cli.rank.loop_stats import LoopStats, Readings
from hicache_cli.tracer import works
from hicache_cli.tracer.protocol import TraceEnv
from hicache_cli.tracer.session import Ending, Session

C10D = "torch.distributed.distributed_c10d"
POLL_S = 0.2  # without the tracer: how often the stop file and hicache's pid are looked at
EXIT_JOIN_S = 5.0  # at the program's exit, the longest its exit waits for this thread


class Refused(Exception):
    """This process is not one to attach to (said in the status file, nothing installed)."""


class Agent:
    def __init__(self, boot: BootArgs, status: AgentStatus) -> None:
        self.boot = boot
        self.run_dir = Path(boot.run_dir)
        self.status = status
        self.c10d: Any = sys.modules[C10D]
        self.torch: Any = sys.modules["torch"]
        self.table: works.WorkTable | None = None
        self.session: Session | None = None
        self.lifeline = Lifeline(boot.owner)
        self.thread: threading.Thread | None = None  # the agent's own thread, running `run`
        self.exiting = threading.Event()  # the program is exiting: detach now, and finish
        self.walker: Walker | None = None  # the census running, cut short at exit
        self.follower: Follower | None = None  # hicache attach --follow (follow.py)

    def attach(self) -> None:
        c10d = self.c10d
        if "__hicache_originals__" in c10d.ProcessGroup.__dict__:
            raise Refused("its torch.distributed is already traced by hicache (hicache trace)")
        if any(t.name == protocol.THREAD_NAME and t is not threading.current_thread() for t in threading.enumerate()):
            raise Refused("another hicache attach is attached to it already")
        atexit.register(self.at_exit)  # before the session's: run after it (last in, first out)
        self.status.rank, self.status.world_size = int(c10d.get_rank()), int(c10d.get_world_size())
        self.write_status()
        torch_dir = os.path.dirname(self.torch.__file__) + os.sep
        table = works.WorkTable(skip_prefixes=(torch_dir,))
        if self.boot.follow_s:  # the hooks only for a window, when a holder grows (follow.py)
            hooks = Hooks(
                on=lambda: works.install(table, c10d.ProcessGroup, c10d.Work, c10d.get_global_rank),
                off=lambda: works.uninstall(c10d.ProcessGroup),
                site_of=table.made_at,
                forget=table.reset,
            )
            self.follower = Follower(self.boot.follow_s, self.boot.window_s, hooks)
        if self.boot.census:
            self.census("start")  # a follow's first census too
        if self.exiting.is_set() or not (self.boot.tracer or self.follower):
            return
        self.table = table
        if self.follower is None:
            works.install(table, c10d.ProcessGroup, c10d.Work, c10d.get_global_rank)
        # samples go to the agents' directory; the stop file is hicache's, in the run directory
        env = TraceEnv(protocol.agent_dir(self.run_dir), self.boot.hz, None, self.boot.owner)
        stop, follows = str(self.run_dir / protocol.STOP_FILE), self.follower is not None
        guest = Ending(stop, f"{DETACHED_PREFIX}hicache asked", guest=True, agent_ends=follows)
        where = (env, table, LoopStats(), self.status.rank, self.status.world_size, guest)
        self.session = Session(*where) if self.follower is None else FollowedSession(self.follower, *where)
        self.status.rank_file = f"rank-{self.session.slot}.jsonl"
        self.write_status()

    def wait(self) -> str:
        """Until hicache asks to detach or is gone, or the program exits; why."""
        if self.session is not None and self.follower is None:
            self.session.probe.join()
        stop = self.run_dir / protocol.STOP_FILE
        while True:
            if self.exiting.is_set() or (self.session is not None and self.session.exiting):
                return EXITED
            if stop.exists():
                return "hicache asked"
            if (lost := self.lifeline.lost()) is not None:
                return lost
            if self.session is not None and self.session.probe.join(0):
                return "the probe stopped"  # it ended on its own (its failure): detach too
            if self.follower is not None:
                self.follower.heap(sys.getallocatedblocks())
                self.follower.tick()
                if self.follower.due():
                    self.census("live")
            self.exiting.wait(POLL_S)

    def at_exit(self) -> None:
        """The program exits (its exit hooks, on its main thread): cut the census short, and
        wait for this agent to detach and end, so that no thread of hicache's is left when
        the interpreter finalizes."""
        self.exiting.set()
        if self.walker is not None:
            self.walker.deadline = 0.0
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(EXIT_JOIN_S)

    def detach(self, reason: str) -> None:
        """Undo, in the order that leaves nothing half done: (a follow's census at detach,)
        the probe's final line, the hooks, the weak references; each step on its own, so one
        failure skips no other."""
        leftovers = self.status.leftovers
        counted = self.boot.census and reason == "hicache asked"  # hicache waits for the census at detach
        if counted and self.follower is not None:  # a follow's first: its count is the probe's last line's
            leftovers += _guarded(lambda: self.census("end"), "the census at detach")
        if self.session is not None:
            leftovers += _guarded(lambda: self.session.detach(f"{DETACHED_PREFIX}{reason}"), "the probe")
        if self.follower is not None:
            leftovers += _guarded(self.follower.close, "the follow's tracer window")
        if self.table is not None:
            leftovers += _guarded(lambda: works.uninstall(self.c10d.ProcessGroup), "the Work hooks")
            if (seen := self.table.polled_before) is not None:  # the program polls the Works the census found
                self.status.polled_before = dict(zip(("file", "line", "function", "polls", "true"), seen, strict=True))
            self.table.forget()
        self.session = self.table = None
        if reason != EXITED:  # at exit the hook is running: it goes with the process
            atexit.unregister(self.at_exit)
        if counted and self.follower is None:
            leftovers += _guarded(lambda: self.census("end"), "the census at detach")
        self.follower = None
        self.status.detach_reason = reason

    def census(self, when: str) -> None:
        """`when`: start, end, or live (a follow's, every few seconds: its file rewritten)."""
        self.walker = Walker()
        follower, live = self.follower, when == "live"
        try:
            taken = take_census(
                self.c10d.Work, self.torch.Tensor, os.getpid(), self.status.rank, when, self.walker,
                site_of=follower.site_of() if follower is not None and live else None,
            )  # fmt: skip
        finally:
            self.walker = None
        if follower is not None:  # the lines found while following, at detach too
            follower.took(taken, last=when == "end")
            taken = follower.explained(taken)
        protocol.write_json_atomic(protocol.census_file(self.run_dir, os.getpid(), when), taken.to_dict())

    def write_status(self) -> None:
        protocol.write_json_atomic(protocol.status_file(self.run_dir, os.getpid()), self.status.to_dict())


class FollowedSession(Session):
    """A follow's probe: its `depth` is the last census's count of Works held (no hook
    counts them between windows), and `holders` the last census's holders with their trends."""

    def __init__(self, follower: Follower, *args: Any) -> None:
        self.follower = follower  # before the probe's thread starts (in Session's __init__) and reads it
        super().__init__(*args)

    def read(self) -> Readings:
        readings = super().read()
        census: Census | None = self.follower.latest
        if census is None:
            return readings
        held = sum(h.tensor_bytes or 0 for h in census.holders)
        return replace(readings, depth=census.works, held_bytes=held, holders=self.follower.holder_lines())


def run(args: dict[str, Any], added: list[str], injected_at: float) -> None:
    """The agent thread's body (boot.py); never raises."""
    boot = BootArgs(**{k: v for k, v in args.items() if k in BootArgs.__dataclass_fields__})
    status = AgentStatus(os.getpid(), protocol.ATTACHED, python=sys.version.split()[0], attached_at=injected_at)
    agent: Agent | None = None
    reason = "the agent failed"
    try:
        agent = Agent(boot, status)
        agent.thread = threading.current_thread()
        agent.attach()
        reason = agent.wait()
    except Refused as exc:
        status.state, status.reason = protocol.REFUSED, str(exc)
    except BaseException as exc:  # noqa: BLE001 - the program goes on; what failed is reported
        # in the status file, never in the program's own output
        status.state, status.reason = protocol.FAILED, f"{type(exc).__name__}: {exc} ({_where(exc)})"
    finally:
        if agent is not None:
            agent.detach(reason)
        if status.state != protocol.REFUSED:
            status.state = protocol.FAILED if status.reason else protocol.DETACHED
            status.detached_at = time.time()
        _guarded(lambda: protocol.write_json_atomic(protocol.status_file(Path(boot.run_dir), os.getpid()),
                                                    status.to_dict()), "the status file")  # fmt: skip
        unload(added, boot.root)


def unload(added: list[str], root: str) -> None:
    """hicache's modules out of sys.modules (only those this attach imported), and the
    import system's and linecache's entries for hicache's tree."""
    for name in added:
        sys.modules.pop(name, None)
    for key in [k for k in list(sys.path_importer_cache) if k.startswith(root)]:
        sys.path_importer_cache.pop(key, None)
    for key in [k for k in list(linecache.cache) if k.startswith(root)]:
        linecache.cache.pop(key, None)


def _where(exc: BaseException) -> str:
    """The innermost frame of hicache's that raised `exc`: file:line in function."""
    frames = traceback.extract_tb(exc.__traceback__)
    last = frames[-1] if frames else None
    return f"{os.path.basename(last.filename)}:{last.lineno} in {last.name}" if last else "?"


def _guarded(step: Any, what: str) -> list[str]:
    """Run one undo step; what it left behind (its own list, or its failure in words)."""
    try:
        left = step()
    except Exception as exc:  # noqa: BLE001 - the other steps must still run
        return [f"{what}: {type(exc).__name__}: {exc}"]
    return list(left) if isinstance(left, list) else []
