"""Rank processes forked from a process that has imported torch once per pytest session.

Spawning a rank pays for an interpreter and a torch import (seconds, most of what a marked
test costs). The fork server pays that once: pytest starts `python -m
hicache_cli.pytest_ranks.forkserver`, which imports torch, torch.distributed, pytest and the
rank runner, runs no torch operation and starts no thread, and then forks one child per
rank asked for. A child takes the rank's environment, working directory and output file,
and runs the same runner a spawned rank runs.

The server is pytest's child (in a session of its own, with the parent-death signal); each
rank is the server's child (its own session, the parent-death signal from the server) and
watches pytest's pid as a spawned rank does. The server reaps its children and writes each
one's exit status (`rank-N.exit`), which pytest, not being their parent, cannot read. It is
a child subreaper: a process a rank leaves behind (a daemon that double-forks) is reparented
to it, and found there by pytest through the server's token, which a forked process's
environment (the server's, as it was exec'd) carries.

Limits: environment variables that torch reads at import (OMP_NUM_THREADS, MKL_*, TORCH_*)
take the values the server started with, and a test that needs a fresh interpreter can ask
for `--hicache-ranks-start=spawn`. Linux only (fork after import is what Linux's
multiprocessing does by default); elsewhere ranks are spawned.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from hicache_cli.files import open_run_file, read_bytes, run_file
from hicache_cli.lifecycle import become_subreaper, parent_death_signal
from hicache_cli.protocol import TREE_ENV
from hicache_cli.pytest_ranks.protocol import exit_file, log_file, write_run_file

SERVER_MODULE = "hicache_cli.pytest_ranks.forkserver"
READY_TIMEOUT_S = 300.0  # the server's torch import, on a loaded machine
REPLY_TIMEOUT_S = 30.0
REAP_EVERY_S = 0.05
CHILD_FAILED = 70  # a forked child that could not even start the runner
UNKNOWN_EXIT = 255  # a rank gone without an exit status (the server itself was gone)
EXIT_FILE_WAIT_S = 0.5
FORK_AVAILABLE = sys.platform.startswith("linux")


class ForkServerError(RuntimeError):
    """The fork server did not start or stopped answering; ranks are spawned instead."""


class ForkedRank:
    """A rank forked by the server: what launch needs of a Popen (pid, poll, returncode)."""

    def __init__(self, pid: int, run_dir: Path, rank: int) -> None:
        self.pid = pid
        self.run_dir = run_dir
        self.rank = rank
        self.returncode: int | None = None
        self._gone_since: float | None = None

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        try:
            written = read_bytes(exit_file(self.run_dir, self.rank), follow=False)
            self.returncode = int(json.loads(written)["returncode"])
            return self.returncode
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if _running(self.pid):
            return None
        # ended, but the server has not written its status yet (or is itself gone)
        now = time.monotonic()
        if self._gone_since is None:
            self._gone_since = now
        elif now - self._gone_since > EXIT_FILE_WAIT_S:
            self.returncode = UNKNOWN_EXIT
        return self.returncode


def _end_stale(reply: dict[str, Any]) -> None:
    """A rank forked for a request that was abandoned (pytest interrupted mid-request): nobody
    will run or release it."""
    if "pid" in reply:
        with contextlib.suppress(OSError):
            os.killpg(int(reply["pid"]), signal.SIGKILL)


def _running(pid: int) -> bool:
    """Whether `pid` is a process that has not ended (a zombie has); /proc on Linux."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


class ForkServer:
    """pytest's end: start the server once, ask it for ranks, stop it at the end."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.token = f"forkserver-{os.getpid()}-{os.urandom(6).hex()}"
        with run_file(log, "append", binary=True) as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", SERVER_MODULE],
                env={**env, TREE_ENV: self.token},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=out,
                start_new_session=True,  # a terminal's Ctrl-C reaches pytest only
                preexec_fn=parent_death_signal(),
            )
        self.log = log
        self._asked = 0
        self._pending = b""
        if self._read_line(READY_TIMEOUT_S).get("ready") is not True:
            self.close()
            raise ForkServerError(f"the hicache fork server did not start (see {log})")

    def fork(self, run_dir: Path, rank: int, env: dict[str, str], cwd: str) -> ForkedRank:
        self._asked += 1
        request = {"id": self._asked, "run_dir": str(run_dir), "rank": rank, "env": env, "cwd": cwd}
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except (OSError, ValueError) as exc:
            raise ForkServerError(f"the hicache fork server is gone: {exc}") from None
        reply = self._read_line(REPLY_TIMEOUT_S)
        while reply.get("id", self._asked) != self._asked:  # the answer to a request pytest gave up on
            _end_stale(reply)
            reply = self._read_line(REPLY_TIMEOUT_S)
        if "pid" not in reply:
            raise ForkServerError(f"the hicache fork server could not fork: {reply.get('error', reply)}")
        return ForkedRank(int(reply["pid"]), run_dir, rank)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """End the server (its ranks are pytest's to stop, and have been)."""
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def _read_line(self, timeout_s: float) -> dict[str, Any]:
        """The server's next line, read from the pipe itself (a buffered reader could hold a
        second line that select would not see), or {} at the timeout or the pipe's end."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._pending:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                return {}
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except ValueError:
            reply = {}
        return reply if isinstance(reply, dict) else {}


# -- the server ---------------------------------------------------------------------------


def serve(commands: IO[bytes], replies: IO[bytes]) -> None:
    """Import what every rank needs, say ready, then fork a rank per request until stdin
    closes, reaping children and writing their exit statuses as they end."""
    import torch  # noqa: F401 - imported once, here, for every rank forked below
    import torch.distributed  # noqa: F401

    from hicache_cli.pytest_ranks import runner  # noqa: F401
    from hicache_cli.tracer import hooks, session  # noqa: F401

    with contextlib.suppress(ImportError):  # the test modules import pytest; its rewriter too
        import _pytest.assertion.rewrite  # noqa: F401
        import pytest  # noqa: F401
    children: dict[int, tuple[Path, int]] = {}
    become_subreaper()  # what a rank leaves behind comes here, where pytest finds it
    arm_death_signal = parent_death_signal()  # made here: it names the server as the parent to watch
    _reply(replies, {"ready": True})
    fd = commands.fileno()
    pending = b""
    while True:
        ready, _, _ = select.select([fd], [], [], REAP_EVERY_S)
        _reap(children)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            _answer(line, children, replies, arm_death_signal)
    deadline = time.monotonic() + 5.0  # stdin closed: pytest is done; reap what ends soon
    while children and time.monotonic() < deadline:
        _reap(children)
        time.sleep(REAP_EVERY_S)


def _answer(
    line: bytes, children: dict[int, tuple[Path, int]], replies: IO[bytes], arm: Callable[[], None] | None
) -> None:
    try:
        request = json.loads(line)
        asked = request.get("id")
        run_dir, rank = Path(request["run_dir"]), int(request["rank"])
        env, cwd = dict(request["env"]), str(request["cwd"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        _reply(replies, {"error": f"bad request: {exc}"})
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError as exc:
        _reply(replies, {"id": asked, "error": f"fork: {exc}"})
        return
    if pid == 0:
        _child(run_dir, rank, env, cwd, arm)  # never returns
    children[pid] = (run_dir, rank)
    _reply(replies, {"id": asked, "pid": pid})


def _child(run_dir: Path, rank: int, env: dict[str, str], cwd: str, arm: Callable[[], None] | None) -> None:
    """The rank: its own session, its output file, its environment; then the runner."""
    try:
        os.setsid()
        if arm is not None:
            arm()  # the server's death: SIGTERM (the server dies with pytest)
        out = open_run_file(log_file(run_dir, rank), "truncate")
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        os.close(null)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        for signo in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(signo, signal.SIG_DFL if signo != signal.SIGINT else signal.default_int_handler)
        from hicache_cli.pytest_ranks import runner

        runner.main([runner.__file__, str(run_dir), str(rank)])
    except BaseException:  # noqa: BLE001 - a child must never return into the server's loop
        with contextlib.suppress(BaseException):
            traceback.print_exc()
            sys.stderr.flush()
        os._exit(CHILD_FAILED)


def _reap(children: dict[int, tuple[Path, int]]) -> None:
    """Every child that ended: a rank (its status written for pytest), or an orphan a rank left
    behind and pytest stopped (reparented here: only its zombie is collected)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        where = children.pop(pid, None)
        if where is not None:
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            with contextlib.suppress(OSError):
                write_run_file(exit_file(*where), json.dumps({"returncode": code}))


def _reply(replies: IO[bytes], message: dict[str, Any]) -> None:
    replies.write(json.dumps(message).encode() + b"\n")
    replies.flush()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # pytest stops the server by closing its stdin
    serve(sys.stdin.buffer, sys.stdout.buffer)
