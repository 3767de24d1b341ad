"""`hicache stress`: torchrun and its ranks on loopback (or across nodes), a strategy of the
supervisor (supervisor.follow). With `--launcher fork` the ranks are forked by rank/forked.py,
which takes torchrun's place (its command, its log, its failure summary): followed the same way.

The launcher never trusts the ranks to end on their own: it holds a hard deadline
(start-up allowance + duration + grace), after which it stops torchrun's whole process
group, SIGTERM first, then SIGKILL. Ctrl-C stops everything the same way.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from hicache_cli.config import RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.launch.nodes import Feeder, Head, NodeSpec
from hicache_cli.launch.supervisor import KILL_WAIT_S, ProcessTree, Stop, Watchdog
from hicache_cli.launch.torchrun_log import worker_exits_in
from hicache_cli.lifecycle import owner_token, parent_death_signal
from hicache_cli.outcome import RunOutcome, WorkerExit
from hicache_cli.protocol import EARLY_STOP, NODE_ENV, OWNER_ENV, SECRET_ENV, TORCHRUN_LOG
from hicache_cli.rundir import open_run_log
from hicache_cli.sample import Sample
from hicache_cli.series import RunFollower
from hicache_cli.targets import RankedTarget

LOOPBACK = "127.0.0.1"
# torchrun gone by itself: how long its ranks get to leave, past their own grace
SELF_END_EXTRA_S = 2.0
TORCHRUN_TERM_GRACE_S = 3.0


@dataclass(frozen=True)
class LaunchConfig:
    run_dir: Path
    config: RunConfig
    host: str = LOOPBACK
    port: int | None = None  # None: a free port picked at launch
    startup_timeout_s: float = 90.0  # launch until every rank has sampled
    stop_grace_s: float = 10.0  # after the duration, before the launcher kills the ranks
    poll_interval_s: float = 0.5
    nodes: NodeSpec | None = None  # runs across nodes: this node's part (None: one machine)

    @property
    def target(self) -> RankedTarget:
        assert isinstance(self.config.target, RankedTarget)
        return self.config.target

    @property
    def node_rank(self) -> int:
        return self.nodes.node_rank if self.nodes else 0

    @property
    def expected_ranks(self) -> int:
        """Ranks whose samples this node sees: all on node 0 (or one machine), else its own."""
        return self.nodes.nproc_per_node if self.nodes and not self.nodes.is_head else self.target.world_size


def pick_port(host: str, requested: int | None) -> int:
    """A port torchrun's rendezvous store can listen on: the requested one, checked, or a free one.

    Whatever `host` is, the store (a TCPStore) listens on every address: [::] dual-stack, or
    0.0.0.0 without IPv6. The port is checked the same way, so one that anything on this
    machine listens on, on any address, is busy here (and not a crash of rank 0 later).
    """
    if requested is not None and not 1 <= requested <= 65535:
        raise UsageError(f"--port: {requested} is not a valid TCP port (1-65535)")
    if requested is None:
        # A port the kernel hands out (bind to 0) is an ephemeral one: between our check and
        # torchrun's listen, any outgoing connection on this machine (gloo opens many) may be
        # given it, and the rendezvous fails with EADDRINUSE. Ports below the ephemeral range
        # are never handed out that way; a random one is taken only by an explicit bind.
        for candidate in _below_ephemeral_ports():
            with contextlib.suppress(UsageError):
                return _check_port(host, candidate, f"port {candidate}")
    return _check_port(host, requested or 0, f"port {requested}" if requested else "a free port")


def _below_ephemeral_ports(tries: int = 20) -> list[int]:
    """Random ports from 10000 up to the kernel's ephemeral range; none where it cannot be read."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return []
    return random.sample(range(10000, low), min(tries, low - 10000)) if low > 10000 else []


def _check_port(host: str, port: int, what: str) -> int:
    for family, everywhere in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the store's own socket
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                sock.bind((everywhere, port))
                return sock.getsockname()[1]
        except OSError as exc:
            if family == socket.AF_INET6 and exc.errno != errno.EADDRINUSE:
                continue  # no IPv6 here: the store listens on 0.0.0.0
            raise UsageError(
                f"cannot bind {what} on every address (torchrun's rendezvous store listens on all of them, "
                f"not only on {host}): {exc.strerror or exc}"
            ) from None
    raise AssertionError("unreachable: the IPv4 attempt returns or raises")


def ranks_command(config: LaunchConfig, port: int) -> list[str]:
    """What starts the ranks: torchrun, or with `--launcher fork` (one machine) the fork launcher."""
    if config.config.launcher == "fork":
        assert config.nodes is None  # refused with --nnodes (configure.ranks_config)
        return [
            sys.executable,
            "-m",
            "hicache_cli.rank.forked",
            f"--nproc={config.target.world_size}",
            f"--master-addr={config.host}",
            f"--master-port={port}",
            str(config.run_dir.resolve()),
        ]
    return torchrun_command(config, port)


def torchrun_command(config: LaunchConfig, port: int) -> list[str]:
    nodes = config.nodes
    if nodes is None:
        where = ["--nnodes=1", f"--nproc-per-node={config.target.world_size}"]
        where += [f"--master-addr={config.host}", f"--master-port={port}"]
    else:  # torchrun's own multi-node rendezvous; it assigns global ranks, not --node-rank
        where = [f"--nnodes={nodes.nnodes}", f"--node-rank={nodes.node_rank}"]
        where += [f"--nproc-per-node={nodes.nproc_per_node}", "--rdzv-backend=c10d"]
        where += [f"--rdzv-endpoint={nodes.endpoint}", f"--rdzv-id={nodes.rdzv_id}"]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *where,
        "--max-restarts=0",
        "--monitor-interval=0.2",
        "-m",
        "hicache_cli.rank.entry",
        str(config.run_dir.resolve()),
    ]


def rank_environment(host: str, nodes: NodeSpec | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    if nodes.loopback if nodes else host == LOOPBACK:
        env["GLOO_SOCKET_IFNAME"] = "lo"  # keep gloo's pairs on loopback too
    env[NODE_ENV] = str(nodes.node_rank if nodes else 0)
    env["PYTHONUNBUFFERED"] = "1"
    env["TORCH_SHOW_CPP_STACKTRACES"] = "0"
    env[OWNER_ENV] = owner_token()  # ranks stop on their own if this process is killed
    env.pop(SECRET_ENV, None)  # the nodes' link secret is hicache's, never the ranks'
    # A hicache_model.py or torch.py in the user's directory must not shadow ours: Python 3.11+
    # leaves the current directory off sys.path, and torchrun starts in the run directory.
    env["PYTHONSAFEPATH"] = "1"
    # Ranks import the project from wherever this interpreter found it.
    project_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (project_root, env.get("PYTHONPATH")) if p)
    return env


def on_node(samples: dict[int, list[Sample]], rank: int, node: int) -> bool:
    """Whether a rank runs on this node: only those may be signalled (a pid means nothing elsewhere)."""
    series = samples.get(rank)
    return bool(series) and series[-1].node == node


class TorchrunRanks:
    """The supervisor's strategy for hicache's own ranks: torchrun started in a session of
    its own; the ranks (each in a session of torchrun's making) found as its children and by
    their samples; the other nodes' link pumped on node 0, or fed on the others."""

    def __init__(self, config: LaunchConfig) -> None:
        self.config = config
        self.follower = RunFollower(config.run_dir)
        self.tree = ProcessTree()
        hang_after = max(3.0, 20.0 / config.config.probe_hz)
        node = config.node_rank
        here = functools.partial(on_node, node=node)
        self.watchdog: Watchdog | None = Watchdog(config.run_dir, config.config.stall_timeout_s, hang_after, here)
        self.proc: subprocess.Popen[bytes] | None = None
        self.link: Head | Feeder | None = None
        self.all_started = False
        self.deadline = 0.0
        self.link_end = LinkEnd()

    def pids_of(self, samples: dict[int, list[Sample]]) -> list[int]:
        """The ranks of this node, by the pid in their samples (a pid means nothing elsewhere)."""
        node = self.config.node_rank
        return [s[-1].pid for s in samples.values() if s and s[-1].node == node]

    def start(self) -> None:
        config = self.config
        port = pick_port(config.host, config.port) if config.nodes is None else config.nodes.rdzv_port
        self.link = open_link(config)
        duration = config.config.duration_s or 0.0
        self.deadline = time.monotonic() + config.startup_timeout_s + duration + config.stop_grace_s
        with open_run_log(config.run_dir / TORCHRUN_LOG) as log:
            self.proc = subprocess.Popen(
                ranks_command(config, port),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.tree.environment(rank_environment(config.host, config.nodes)),
                cwd=config.run_dir.resolve(),  # never the user's directory: see rank_environment
                start_new_session=True,  # Ctrl-C reaches us, not the ranks; we stop them
                preexec_fn=parent_death_signal(),  # SIGKILLed, we take torchrun with us
            )
        self.tree.add_root(self.proc.pid)

    def exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def check(self, samples: dict[int, list[Sample]], now: float) -> Stop | None:
        config = self.config
        if self.link is not None and (stop := self.link.pump()) is not None:
            return Stop(stop)
        if not self.all_started and len(samples) == config.expected_ranks and all(samples.values()):
            self.all_started = True  # every rank's workload has begun, give or take a poll
            self.deadline = min(self.deadline, now + (config.config.duration_s or 0.0) + config.stop_grace_s)
        if now >= self.deadline:
            if self.all_started:
                return Stop(f"ranks still running {config.stop_grace_s:.0f} s after the duration")
            return Stop(f"not every rank started within {config.startup_timeout_s:.0f} s")
        return None

    def stop_early(self, samples: dict[int, list[Sample]], reason: str, now: float) -> Stop | None:
        """Every rank is asked (EARLY_STOP) to stop as at its deadline; the run completes."""
        for rank, series in samples.items():
            if on_node(samples, rank, self.config.node_rank):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(series[0].pid, EARLY_STOP)
        self.deadline = min(self.deadline, now + self.config.stop_grace_s)
        return None

    def may_stop_early(self, samples: dict[int, list[Sample]]) -> bool:
        return self.all_started

    def stop(self, stop: Stop | None) -> None:
        if stop is not None:
            if isinstance(self.link, Head):
                self.link.stop(stop.reason)
            if self.proc is not None:
                stop_torchrun(self.proc, self.tree)
        elif self.proc is not None:
            # torchrun is gone; its ranks must be too (killed under them, it leaves them running)
            grace = self.config.target.stop_grace_s + SELF_END_EXTRA_S
            self.tree.end([(None, grace), (signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)], groups=False)
        self.link_end = finish_link(self.link, self.config)

    def outcome(self, stop: Stop | None) -> RunOutcome:
        exits = worker_exits_in(self.config.run_dir)
        for rank, (code, sig) in self.link_end.remote_exits.items():
            exits.setdefault(rank, WorkerExit(rank, code, sig))
        return RunOutcome(
            exit_code=self.proc.returncode if self.proc is not None and stop is None else None,
            stopped=stop.reason if stop is not None else None,
            stalls=stop.stalls if stop is not None else (),
            worker_exits=exits,
            lost_nodes=self.link_end.lost_nodes,
            link_error=self.link_end.link_error,
        )


def stop_torchrun(proc: subprocess.Popen[bytes], tree: ProcessTree) -> None:
    """Stop torchrun and every rank: SIGTERM first (ranks write a final line), then SIGKILL.

    torchrun starts each rank in a session of its own, so signalling torchrun's group does
    not reach them: they are found as its children (and remembered, should torchrun already
    be gone) and ended directly."""
    tree.refresh()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)  # torchrun forwards it to the ranks
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=TORCHRUN_TERM_GRACE_S)
    tree.end([(None, 0.5), (signal.SIGTERM, 0.0), (signal.SIGKILL, KILL_WAIT_S)])
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5.0)


def open_link(config: LaunchConfig) -> Head | Feeder | None:
    """Across nodes: node 0 hosts the sample store before its ranks start; the others connect."""
    if config.nodes is None:
        return None
    text = json.dumps(config.config.to_dict(), sort_keys=True)
    if config.nodes.is_head:
        return Head(config.nodes, text, config.run_dir)
    return Feeder(config.nodes, text, config.run_dir, config.startup_timeout_s)


@dataclass(frozen=True)
class LinkEnd:
    """What the link between nodes says at the end: node 0 hears of lost nodes and the other
    nodes' ranks' exits; another node, why its samples stopped reaching node 0."""

    lost_nodes: dict[int, str] = field(default_factory=dict)
    remote_exits: dict[int, tuple[int | None, str | None]] = field(default_factory=dict)  # rank -> code, signal
    link_error: str | None = None


def finish_link(link: Head | Feeder | None, config: LaunchConfig) -> LinkEnd:
    """The other nodes' last word (node 0), or this node's last lines to node 0."""
    if isinstance(link, Head):
        link.finish(config.stop_grace_s)
        return LinkEnd(lost_nodes=link.lost(), remote_exits=link.exits())
    if isinstance(link, Feeder):
        exits = worker_exits_in(config.run_dir)
        link.finish({r: (e.exit_code, e.signal) for r, e in exits.items()})
        return LinkEnd(link_error=link.link_error)
    return LinkEnd()
