"""`hicache trace -- COMMAND`: start someone else's program with the tracer armed, follow
its processes' samples, and end it, whatever ends the run, with nothing left running.

The program runs in a session of its own (a terminal's Ctrl-C reaches hicache, which
stops the program in order). It is stopped the way a user would stop it, gently first:
the stop file (every observed process writes its final line), SIGINT to its process
group (a terminal's Ctrl-C), then SIGTERM and SIGKILL to every process below it,
including the ones that left its process group or were orphaned.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from hicache_cli.analysis.watchdog import find_stalls
from hicache_cli.config import DEFAULT_PROBE_HZ, RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.launch.launcher import EarlyStop, GuardedView, LaunchResult
from hicache_cli.lifecycle import STOPS, owner_token, parent_death_signal
from hicache_cli.protocol import STACKS
from hicache_cli.sample import Sample
from hicache_cli.series import RunFollower
from hicache_cli.targets import TracedCommand
from hicache_cli.tracer import protocol
from hicache_cli.units import MAX_TIMEOUT_S, parse_duration

FINAL_LINES_WAIT_S = 1.5  # after the stop file: time for every process to write its final line
_LOOP = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def trace_config(
    command: list[str],
    loop: str | None = None,
    duration: str | None = None,
    probe_hz: float = DEFAULT_PROBE_HZ,
    warmup: str | None = None,
    leak_threshold_mb_per_h: float = 100.0,
    stall_timeout: str = "60s",
) -> RunConfig:
    """The config of a trace from its options as typed (durations as text, e.g. 30s)."""
    return traced_config(
        command,
        loop,
        parse_duration(duration, "duration") if duration is not None else None,
        probe_hz,
        parse_duration(warmup, "warmup") if warmup is not None else None,
        leak_threshold_mb_per_h,
        parse_duration(stall_timeout, "stall-timeout", MAX_TIMEOUT_S),
    )


def traced_config(
    command: list[str],
    loop: str | None,
    duration_s: float | None,
    probe_hz: float,
    warmup_s: float | None,
    leak_threshold_mb_per_h: float,
    stall_timeout_s: float,
) -> RunConfig:
    """The config of a trace (duration None: until the program exits): the command checked
    (it must exist), every value checked by RunConfig.validate; bad input raises UsageError
    before anything is created."""
    if not command:
        raise UsageError("name the program after --, e.g. hicache trace -- torchrun --nproc-per-node 2 train.py")
    program = command[0]
    if os.sep in program:
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise UsageError(f"cannot run {program!r}: not an executable file")
    elif shutil.which(program) is None:
        raise UsageError(f"cannot run {program!r}: no such command on PATH")
    if loop is not None and not _LOOP.fullmatch(loop):
        raise UsageError(f"--loop {loop!r}: give MODULE:QUALNAME, e.g. my_server.scheduler:Scheduler.step")
    return RunConfig(
        target=TracedCommand(command=tuple(command), loop=loop, cwd=os.getcwd()),
        duration_s=duration_s,
        probe_hz=probe_hz,
        warmup_s=warmup_s,
        leak_threshold_mb_per_h=leak_threshold_mb_per_h,
        stall_timeout_s=stall_timeout_s,
    ).validate()


@dataclass(frozen=True)
class TraceLaunch:
    run_dir: Path
    config: RunConfig  # its target a TracedCommand
    passthrough: bool  # the program's output to ours; else to the run directory's program.log
    to_stderr: bool = False  # passed through, its stdout goes to our stderr (stdout holds --json's document)
    interrupt_grace_s: float = 5.0  # after SIGINT, before SIGTERM
    term_grace_s: float = 3.0  # after SIGTERM, before SIGKILL
    poll_interval_s: float = 0.5

    @property
    def target(self) -> TracedCommand:
        assert isinstance(self.config.target, TracedCommand)
        return self.config.target

    @property
    def command(self) -> list[str]:
        return list(self.target.command)


class ProgramTree:
    """The program's processes: its descendants (refreshed while it runs) and every
    process that wrote samples, each held as a psutil handle from when it was first seen
    (so a pid reused later is never signalled)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.known: dict[int, psutil.Process] = {}
        self.refresh({})

    def refresh(self, samples: dict[int, list[Sample]]) -> None:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                self.known.setdefault(child.pid, child)
        for series in samples.values():
            if series and series[-1].pid not in self.known:
                with contextlib.suppress(psutil.Error):
                    self.known[series[-1].pid] = psutil.Process(series[-1].pid)

    def running(self) -> list[psutil.Process]:
        alive = []
        for proc in self.known.values():
            with contextlib.suppress(psutil.Error):
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
        return alive

    def signal_all(self, signo: int) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signo)
        for proc in self.running():
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signo)

    def wait(self, timeout_s: float) -> bool:
        """Wait until the program and every known process have ended; True if they have."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=0.1)
                continue
            if not self.running():
                return True
            time.sleep(0.1)
        return self.proc.poll() is not None and not self.running()


def launch_traced(
    config: TraceLaunch,
    on_tick: Callable[[dict[int, list[Sample]], float], None],
    early_stop: EarlyStop | None = None,
) -> LaunchResult:
    """Run the traced program until it exits, the duration ends, the watchdog or the gate
    ends it, or hicache is asked to stop; then make sure all of it has ended."""
    started = time.monotonic()
    follower, view = RunFollower(config.run_dir), GuardedView(on_tick)
    proc = _start(config)
    tree = ProgramTree(proc)
    interrupted, reason, stalls, stopped_early = False, None, [], None
    try:
        reason, stalls, stopped_early = _supervise(config, proc, tree, follower, view, started, early_stop)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP (lifecycle.StopRequests)
        interrupted, reason = True, f"interrupted by {STOPS.signal or 'SIGINT'}"
    except BaseException:
        _stop(config, tree, follower)
        raise
    with STOPS.finishing():
        tree.refresh(follower.poll())
        _stop(config, tree, follower)  # after the program's own exit too: nothing may linger
        view(follower.poll(), time.monotonic() - started)
    code = proc.returncode
    return LaunchResult(
        exit_code=code,
        interrupted=interrupted,
        killed=reason is not None,
        reason=reason,
        wall_s=time.monotonic() - started,
        stalls=tuple(stalls),
        stopped_early=stopped_early,
        interrupted_by=STOPS.signal or "SIGINT" if interrupted else None,
        followed=follower.run,
    )


STDERR_FD = 2  # the process's own stderr, whatever sys.stderr has been replaced with


def _start(config: TraceLaunch) -> subprocess.Popen[bytes]:
    env = protocol.environment(
        dict(os.environ), config.run_dir, config.config.probe_hz, config.target.loop, owner_token()
    )
    log = None if config.passthrough else (config.run_dir / protocol.PROGRAM_LOG).open("ab")
    try:
        return subprocess.Popen(
            config.command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log or (STDERR_FD if config.to_stderr else None),
            stderr=subprocess.STDOUT if log else None,
            start_new_session=True,  # Ctrl-C reaches hicache, which stops the program in order
            preexec_fn=parent_death_signal(),  # hicache SIGKILLed: the program gets SIGTERM
        )
    except OSError as exc:
        raise UsageError(f"cannot run {config.command[0]!r}: {exc.strerror or exc}") from None
    finally:
        if log is not None:
            log.close()


def _supervise(
    config: TraceLaunch,
    proc: subprocess.Popen[bytes],
    tree: ProgramTree,
    follower: RunFollower,
    view: GuardedView,
    started: float,
    early_stop: EarlyStop | None,
) -> tuple[str | None, list, str | None]:
    duration = config.config.duration_s
    watch_loop = config.target.loop is not None
    stopped_early = None
    while proc.poll() is None:
        samples = follower.poll()
        now = time.monotonic()
        view(samples, now - started)
        tree.refresh(samples)
        if watch_loop and (stalls := find_stalls(samples, time.time(), config.config.stall_timeout_s, float("inf"))):
            _request_stacks(stalls)
            return "watchdog: " + "; ".join(s.message for s in stalls), stalls, None
        if duration is not None and now - started >= duration:
            return f"reached the duration ({duration:g} s)", [], None
        if early_stop is not None and samples and stopped_early is None:
            stopped_early = early_stop(samples)
            if stopped_early is not None:
                return stopped_early, [], stopped_early
        time.sleep(config.poll_interval_s)
    return None, [], stopped_early


def _request_stacks(stalls: list) -> None:
    for stall in stalls:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(stall.pid, STACKS)
    time.sleep(0.5)


def _stop(config: TraceLaunch, tree: ProgramTree, follower: RunFollower) -> None:
    """Final lines first (the stop file), then SIGINT, SIGTERM, SIGKILL, each after a grace."""
    stop_file = config.run_dir / protocol.STOP_FILE
    with contextlib.suppress(OSError):
        stop_file.touch()
    deadline = time.monotonic() + FINAL_LINES_WAIT_S
    while time.monotonic() < deadline and not _all_final(follower.poll(), tree):
        time.sleep(0.1)
    for signo, grace in (
        (signal.SIGINT, config.interrupt_grace_s),
        (signal.SIGTERM, config.term_grace_s),
        (signal.SIGKILL, 2.0),
    ):
        tree.refresh({})
        if tree.wait(0.0):
            break
        tree.signal_all(signo)
        if tree.wait(grace):
            break
    with contextlib.suppress(OSError):
        stop_file.unlink()


def _all_final(samples: dict[int, list[Sample]], tree: ProgramTree) -> bool:
    """Every process that sampled and still runs has written its final line."""
    alive = {p.pid for p in tree.running()}
    return all(s[-1].kind == "final" for s in samples.values() if s and s[-1].pid in alive)
