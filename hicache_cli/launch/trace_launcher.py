"""`hicache trace -- COMMAND`: someone else's program, started with the tracer armed, a
strategy of the supervisor (supervisor.follow).

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
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from hicache_cli.config import RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.launch.supervisor import KILL_WAIT_S, ProcessTree, Stop, Watchdog
from hicache_cli.lifecycle import owner_token, parent_death_signal
from hicache_cli.outcome import RunOutcome
from hicache_cli.rundir import open_run_log, touch_run_file
from hicache_cli.sample import Sample
from hicache_cli.series import RunFollower
from hicache_cli.targets import TracedCommand
from hicache_cli.tracer import protocol

FINAL_LINES_WAIT_S = 1.5  # after the stop file: time for every process to write its final line
INTERRUPT_GRACE_S = 5.0  # after SIGINT, before SIGTERM
TERM_GRACE_S = 3.0  # after SIGTERM, before SIGKILL
_LOOP = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
STDOUT_FD, STDERR_FD = 1, 2  # the process's own, whatever sys.stdout and sys.stderr have been replaced with
HELD_NOTE = "hicache: {lines} line(s) the program printed while hicache stopped it (as Ctrl-C would) are in {log}\n"


class OutputRelay:
    """The program's output passed on line by line, off a terminal (where the program sees a
    pipe either way): until hicache begins to stop it; from then on what it prints - its own
    answer to the SIGINT, torchrun's and each rank's traceback - goes to program.log, said in
    one line, so that a CI log does not read as if the program had failed."""

    def __init__(self, log: Path, streams: list[tuple[IO[bytes], int]]) -> None:
        self.log_path = log
        self._held: list[bytes] = []
        self._holding = threading.Event()
        self._threads = [threading.Thread(target=self._pass, args=pair, daemon=True) for pair in streams]
        for thread in self._threads:
            thread.start()

    def _pass(self, stream: IO[bytes], fd: int) -> None:
        for line in iter(stream.readline, b""):
            if self._holding.is_set():
                self._held.append(line)
            else:
                with contextlib.suppress(OSError):  # our reader went away: the program goes on
                    os.write(fd, line)

    def hold(self) -> None:
        self._holding.set()

    def close(self) -> None:
        for thread in self._threads:
            thread.join(KILL_WAIT_S)
        if not self._held:
            return
        with contextlib.suppress(UsageError, OSError), open_run_log(self.log_path) as log:
            log.write(b"".join(self._held))
        with contextlib.suppress(OSError):
            os.write(STDERR_FD, HELD_NOTE.format(lines=len(self._held), log=self.log_path).encode())


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

    @property
    def target(self) -> TracedCommand:
        assert isinstance(self.config.target, TracedCommand)
        return self.config.target


class TracedProgram:
    """The supervisor's strategy for a traced program: the command in a session of its own;
    every process below it (and every one that sampled) held; ended by its own exit, the
    duration, the watchdog (with --loop) or a settled verdict."""

    def __init__(self, launch: TraceLaunch) -> None:
        self.launch = launch
        self.follower = RunFollower(launch.run_dir)
        self.tree = ProcessTree()
        stall = launch.config.stall_timeout_s  # only with --loop does the program have rounds to time
        self.watchdog: Watchdog | None = Watchdog(launch.run_dir, stall, float("inf")) if launch.target.loop else None
        self.proc: subprocess.Popen[bytes] | None = None
        self.relay: OutputRelay | None = None
        self.started = 0.0

    def pids_of(self, samples: dict[int, list[Sample]]) -> list[int]:
        return [s[-1].pid for s in samples.values() if s]

    def start(self) -> None:
        launch = self.launch
        env = protocol.environment(
            dict(os.environ), launch.run_dir, launch.config.probe_hz, launch.target.loop, owner_token()
        )
        log = None if launch.passthrough else open_run_log(launch.run_dir / protocol.PROGRAM_LOG)
        out = STDERR_FD if launch.to_stderr else STDOUT_FD
        relay = log is None and not (os.isatty(out) or os.isatty(STDERR_FD))
        self.started = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                list(launch.target.command),
                env=self.tree.environment(env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if relay else log or (STDERR_FD if launch.to_stderr else None),
                stderr=subprocess.PIPE if relay else (subprocess.STDOUT if log else None),
                start_new_session=True,  # Ctrl-C reaches hicache, which stops the program in order
                preexec_fn=parent_death_signal(),  # hicache SIGKILLed: the program gets SIGTERM
            )
        except OSError as exc:
            raise UsageError(f"cannot run {launch.target.command[0]!r}: {exc.strerror or exc}") from None
        finally:
            if log is not None:
                log.close()
        self.tree.add_root(self.proc.pid)
        if relay:
            assert self.proc.stdout is not None and self.proc.stderr is not None
            streams = [(self.proc.stdout, out), (self.proc.stderr, STDERR_FD)]
            self.relay = OutputRelay(launch.run_dir / protocol.PROGRAM_LOG, streams)

    def exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def check(self, samples: dict[int, list[Sample]], now: float) -> Stop | None:
        duration = self.launch.config.duration_s
        if duration is not None and now - self.started >= duration:
            return Stop(f"reached the duration ({duration:g} s)")
        return None

    def may_stop_early(self, samples: dict[int, list[Sample]]) -> bool:
        return bool(samples)

    def stop_early(self, samples: dict[int, list[Sample]], reason: str, now: float) -> Stop | None:
        return Stop(reason)  # the program knows no deadline of ours: it is stopped now

    def stop(self, stop: Stop | None) -> None:
        """Final lines first (the stop file), then SIGINT, SIGTERM, SIGKILL, each after a
        grace; after the program's own exit too: nothing of it may linger."""
        if self.proc is None:
            return
        self.tree.refresh(self.pids_of(self.follower.poll()), force=True)
        self.tree.sweep()  # a daemon that left at once, reparented away from us
        stop_file = self.launch.run_dir / protocol.STOP_FILE
        if self.relay is not None:
            self.relay.hold()  # what it says while being stopped (its tracebacks of SIGINT) goes to program.log
        with contextlib.suppress(OSError):
            touch_run_file(stop_file)
        self.tree.wait(FINAL_LINES_WAIT_S, lambda: self._all_final(self.follower.poll()))
        ladder = [(signal.SIGINT, INTERRUPT_GRACE_S), (signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, KILL_WAIT_S)]
        self.tree.end(ladder)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=KILL_WAIT_S)
        with contextlib.suppress(OSError):
            stop_file.unlink()
        if self.relay is not None:
            self.relay.close()

    def _all_final(self, samples: dict[int, list[Sample]]) -> bool:
        """Every process that sampled and still runs has written its final line."""
        alive = {p.pid for p in self.tree.running()}
        return all(s[-1].kind == "final" for s in samples.values() if s and s[-1].pid in alive)

    def outcome(self, stop: Stop | None) -> RunOutcome:
        return RunOutcome(
            exit_code=self.proc.returncode if self.proc is not None else None,
            stopped=stop.reason if stop is not None else None,
            stalls=stop.stalls if stop is not None else (),
        )
