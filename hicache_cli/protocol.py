"""What the hicache process and the processes it starts agree on: the run directory's file
names, the signals each side sends, and the environment variables it sets. One place, so
that neither side spells them on its own. Stdlib only; the tracer's own environment, which
foreign programs read, is in tracer/protocol.py.
"""

from __future__ import annotations

import signal
from pathlib import Path

# The run directory (docs/report.md): the only contract between ranks, views and report.
CONFIG_FILE = "config.json"  # the run's StressConfig; every rank reads it
REPORT_FILE = "report.json"
TORCHRUN_LOG = "torchrun.log"
PROGRAM_LOG = "program.log"  # hicache trace: the program's stdout and stderr when the dashboard owns the terminal
STOP_FILE = "trace-stop"  # hicache trace creates it: every traced process writes its final line and stops sampling
STOPPED_AT_END = "stopped by hicache at the end of the trace"  # a traced process's final line after STOP_FILE
EXITED = "the process exited"  # an observed process's final line when its interpreter ended normally
DETACHED_PREFIX = "detached: "  # how an attached process's final line begins (hicache attach detached from it)
# Created exclusively by the one run that gets the directory: of two runs started at once
# on one --run-dir, exactly one creates it; the other is refused.
CLAIM_FILE = ".hicache-run"
LINK_FILE = "node-link.json"  # across nodes, node 0's: what its sample link refused and dropped
SAMPLES_GLOB = "rank-*.jsonl"
# hicache attach: the one subdirectory that the attached processes' agents write in (their
# rank files too), made by hicache and handed to the targets' user (attach/protocol.py)
AGENT_DIR = "agent"
LOGS_GLOB = "rank-*.log"
STACKS_GLOB = "rank-*.stacks.txt"


def samples_file(run_dir: Path, rank: int) -> Path:
    """One sample per line, written by the rank's probe (docs/report.md)."""
    return run_dir / f"rank-{rank}.jsonl"


def sample_files(run_dir: Path) -> dict[int, Path]:
    """The rank files a run directory holds, by rank (`rank-x.jsonl` is none): its own, or
    those the agents of an attach wrote in its AGENT_DIR."""
    paths = sorted(run_dir.glob(SAMPLES_GLOB)) or sorted((run_dir / AGENT_DIR).glob(SAMPLES_GLOB))
    found = ((path.stem.split("-", 1)[1], path) for path in paths)
    return {int(rank): path for rank, path in found if rank.isdigit() and rank.isascii()}


def log_file(run_dir: Path, rank: int) -> Path:
    """Everything the rank printed."""
    return run_dir / f"rank-{rank}.log"


def stacks_file(run_dir: Path, rank: int) -> Path:
    """Every thread's stack, written when the watchdog asks (hicache_cli.stacks)."""
    return run_dir / f"rank-{rank}.stacks.txt"


# Signals. To a rank: SIGTERM, SIGINT, SIGHUP stop it now (interrupted); EARLY_STOP ends
# its run as if the deadline had come (the verdict is settled); hicache_cli.stacks.SIGNAL
# (SIGUSR1) asks for its stacks where its FIFO goes unanswered.
EARLY_STOP = signal.SIGUSR2
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP, EARLY_STOP})
LIFELINE_EVERY_S = 0.5  # how often a rank checks that hicache (and its parent) still run
ORPHANED_EXIT = 128 + signal.SIGHUP  # a rank left behind ends as if its terminal hung up


class ErrorKind:
    """What a rank that raised says of its error in its final line (`error_kind`), decided
    where the exception is known: the analysis orders failures by it, never by their text."""

    CLOSED_AFTER_TIMEOUT = "closed-after-timeout"  # its own timed-out wait closed the pair to `error_peer`
    CONNECTION = "connection"  # the connection broke under it (a peer gone, a pair reset)
    RAISED = "raised"  # anything else


# gloo raises a plain RuntimeError when a pair breaks; these say so (gloo's own words)
CONNECTION_WORDS = ("connection", "closed by peer", "pair closure", "reset by peer")


def connection_lost(exc: BaseException) -> bool:
    """Whether `exc` says a connection broke under the process (a peer gone, a pair reset):
    most often the consequence of another process's failure, not a root cause."""
    text = str(exc).lower()
    return isinstance(exc, ConnectionError) or any(word in text for word in CONNECTION_WORDS)


# Environment variables set for the processes hicache starts.
OWNER_ENV = "HICACHE_OWNER"  # "PID:START" of the hicache that started the run
NODE_ENV = "HICACHE_NODE_RANK"  # each rank: the --node-rank of the hicache that started it
SECRET_ENV = "HICACHE_RUN_SECRET"  # the nodes' link secret: hicache's, removed from every rank's
# Every process hicache starts (and everything below it, by inheritance) carries its run's
# process-tree token: how an orphan reparented away from its parent is still known as the run's.
TREE_ENV = "HICACHE_TREE"
