"""What `--launcher fork` starts instead of torchrun: one process that imports torch once and
forks every rank of the run, each with the environment torchrun gives a rank.

Starting a rank with torchrun pays for torchrun's own interpreter and torch import, and one
more of each per rank (a second or more of CPU each); here they are paid once per run. This
process plays torchrun's part for the launcher (launch/launcher.py), which follows it as it
follows torchrun: each rank in a session of its own; SIGTERM, SIGINT or SIGHUP passed on to
every rank; the first rank that fails ends the others (SIGTERM, then SIGKILL); and the ranks
that failed written to torchrun.log as torchrun's failure summary writes them
(`rank : N (local_rank: N)` / `exitcode : C (pid: P)`, a signal as its negative number), so
that one reader (launch/torchrun_log.py) reads both. It runs no torch operation and starts no
thread before it forks (fork after import, as the pytest plugin's fork server does).

Limits: one machine (across nodes the ranks meet through torchrun's rendezvous); environment
variables torch reads at import take this process's values, as every rank's.

    python -m hicache_cli.rank.forked --nproc N --master-addr HOST --master-port PORT RUN_DIR
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from datetime import datetime, timezone

from hicache_cli.protocol import STOP_SIGNALS

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # to every rank, as torchrun does
WAITED = {*FORWARDED, signal.SIGCHLD}
END_GRACE_S = 10.0  # after a stop is passed on, before the ranks left are killed
# After a rank fails, before the others are stopped: torchrun notices at its next monitor tick
# (0.2 s, as hicache starts it); a peer of the failed rank usually ends on its own first, with
# the error that says why (a closed connection), which a SIGTERM sent at once would pre-empt.
FAILURE_GRACE_S = 1.0
CHILD_FAILED = 70  # a forked rank that could not even start its entry point


def _preload() -> None:
    """What every rank imports, imported once here (the ranks share it)."""
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401

    import hicache_cli.config  # noqa: F401
    import hicache_cli.rank.entry  # noqa: F401
    import hicache_cli.rank.probe  # noqa: F401
    import hicache_model.faults  # noqa: F401
    import hicache_model.hiradix_cache  # noqa: F401
    import hicache_model.policies  # noqa: F401
    import hicache_model.pp_sync  # noqa: F401
    import hicache_model.scheduler  # noqa: F401
    import hicache_model.workload  # noqa: F401


def rank_env(rank: int, nproc: int, addr: str, port: int) -> dict[str, str]:
    """The variables torchrun sets for a rank on one node (and hicache's rank reads)."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "ROLE_WORLD_SIZE": str(nproc),
        "MASTER_ADDR": addr,
        "MASTER_PORT": str(port),
    }


def _start_rank(rank: int, env: dict[str, str], run_dir: str) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = CHILD_FAILED
    try:
        os.setsid()  # a session of its own, as torchrun's ranks
        for signo in FORWARDED:
            signal.signal(signo, signal.SIG_DFL)
        # the stop signals stay blocked: the rank's entry blocks them first thing and its probe takes them
        signal.pthread_sigmask(signal.SIG_SETMASK, STOP_SIGNALS)
        os.environ.update(env)
        from hicache_cli.rank import entry

        code = entry.main(["hicache_cli.rank.entry", run_dir])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the rank's own log has it; the exit code says it failed
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def failure_summary(failed: dict[int, tuple[int, int]], first: int, when: float) -> str:
    """The failed ranks (rank -> exit code, pid) as torchrun's ChildFailedError summary writes them."""
    host = socket.gethostname()
    stamp = datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%d_%H:%M:%S")

    def entry(index: int, rank: int) -> list[str]:
        code, pid = failed[rank]
        why = f"Signal {-code} ({signal.Signals(-code).name}) received by PID {pid}" if code < 0 else "<N/A>"
        return [f"[{index}]:", f"  time      : {stamp}", f"  host      : {host}",
                f"  rank      : {rank} (local_rank: {rank})", f"  exitcode  : {code} (pid: {pid})",
                "  error_file: <N/A>", f"  traceback : {why}"]  # fmt: skip

    others = [r for r in sorted(failed) if r != first]
    lines = ["=" * 60, "hicache_cli.rank.entry FAILED (hicache's fork launcher)", "-" * 60, "Failures:"]
    for index, rank in enumerate(others, 1):
        lines += ["  " + line for line in entry(index, rank)]
    if not others:
        lines.append("  <NO_OTHER_FAILURES>")
    lines += ["-" * 60, "Root Cause (first observed failure):", *entry(0, first), "=" * 60]
    return "\n".join(lines) + "\n"


class Ranks:
    """The forked ranks, reaped as they end; the first failure stops the rest."""

    def __init__(self, pids: dict[int, int]) -> None:
        self.running = dict(pids)  # pid -> rank
        self.failed: dict[int, tuple[int, int]] = {}  # rank -> exit code, pid (before any stop)
        self.first_failed: int | None = None
        self.failed_at: float | None = None
        self.stopping_since: float | None = None
        self.stop_signal: int | None = None
        self.killed = False

    def signal_all(self, signo: int) -> None:
        for pid in self.running:
            try:
                os.kill(pid, signo)
            except ProcessLookupError:
                pass

    def stop(self, signo: int) -> None:
        if self.stopping_since is None:
            self.stopping_since = time.monotonic()
        self.signal_all(signo)

    def reap(self) -> None:
        newly = []
        while self.running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.running.clear()
                return
            if pid == 0:
                break
            rank = self.running.pop(pid, None)
            if rank is None:
                continue
            code = os.waitstatus_to_exitcode(status)  # a signal as its negative number, as torchrun's
            if code != 0 and self.stopping_since is None:
                newly.append(rank)
                self.failed[rank] = (code, pid)
        if newly and self.first_failed is None:
            self.first_failed, self.failed_at = newly[0], time.monotonic()
        if self.failed_at is not None and self.stopping_since is None and self.running:
            if time.monotonic() - self.failed_at >= FAILURE_GRACE_S:
                self.stop(signal.SIGTERM)  # as torchrun: one rank failed, the others are stopped

    def overdue(self) -> bool:
        return self.stopping_since is not None and time.monotonic() - self.stopping_since > END_GRACE_S


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="hicache_cli.rank.forked", description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, required=True)
    parser.add_argument("--master-addr", required=True)
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("run_dir")
    args = parser.parse_args(argv[1:])
    signal.pthread_sigmask(signal.SIG_BLOCK, WAITED | STOP_SIGNALS)  # taken below with sigtimedwait
    _preload()
    ranks = Ranks({
        _start_rank(rank, rank_env(rank, args.nproc, args.master_addr, args.master_port), args.run_dir): rank
        for rank in range(args.nproc)
    })  # fmt: skip
    while ranks.running:
        got = signal.sigtimedwait(WAITED, 0.2)
        if got is not None and got.si_signo in FORWARDED:
            ranks.stop_signal = ranks.stop_signal or got.si_signo
            ranks.stop(got.si_signo)
        ranks.reap()
        if ranks.overdue() and not ranks.killed:
            ranks.killed = True
            ranks.signal_all(signal.SIGKILL)
    if ranks.first_failed is not None:
        print(failure_summary(ranks.failed, ranks.first_failed, time.time()), end="", flush=True)
        return 1
    return 128 + ranks.stop_signal if ranks.stop_signal else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
