"""Launch the ranks with torchrun on loopback and supervise them until the run ends.

The launcher never trusts the ranks to end on their own: it holds a hard deadline
(start-up allowance + duration + grace), after which it stops torchrun's whole process
group, SIGTERM first, then SIGKILL. Ctrl-C stops everything the same way.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from hicache_cli.analysis.torchrun_log import worker_exits_in
from hicache_cli.analysis.watchdog import Stall, find_stalls
from hicache_cli.config import RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.launch.nodes import Feeder, Head, NodeSpec
from hicache_cli.lifecycle import STOPS, owner_token, parent_death_signal
from hicache_cli.protocol import EARLY_STOP, NODE_ENV, OWNER_ENV, SECRET_ENV, STACKS, TORCHRUN_LOG
from hicache_cli.sample import Sample
from hicache_cli.series import RunFollower, RunSeries
from hicache_cli.targets import RankedTarget

LOOPBACK = "127.0.0.1"


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
    def duration_s(self) -> float:
        return self.config.duration_s or 0.0

    @property
    def node_rank(self) -> int:
        return self.nodes.node_rank if self.nodes else 0

    @property
    def expected_ranks(self) -> int:
        """Ranks whose samples this node sees: all on node 0 (or one machine), else its own."""
        return self.nodes.nproc_per_node if self.nodes and not self.nodes.is_head else self.target.world_size


@dataclass(frozen=True)
class LaunchResult:
    exit_code: int | None  # torchrun's, None if it had to be killed
    interrupted: bool  # hicache was asked to stop (interrupted_by says how)
    killed: bool  # the launcher had to stop the ranks itself
    reason: str | None  # why it stopped them, when it did
    wall_s: float
    stalls: tuple[Stall, ...] = ()  # what the watchdog found, when it ended the run
    stopped_early: str | None = None  # why the run was ended before its duration, if it was
    lost_nodes: dict[int, str] = field(default_factory=dict)  # node 0: nodes lost during the run, and how
    remote_exits: dict[int, tuple[int | None, str | None]] = field(default_factory=dict)  # rank -> code, signal
    link_error: str | None = None  # another node: why its samples stopped reaching node 0
    interrupted_by: str | None = None  # the signal that stopped hicache, when one did
    followed: RunSeries | None = None  # every sample the launcher read, to the last line (bounded)


def pick_port(host: str, requested: int | None) -> int:
    """A port torchrun's rendezvous store can listen on: the requested one, checked, or a free one.

    Whatever `host` is, the store (a TCPStore) listens on every address: [::] dual-stack, or
    0.0.0.0 without IPv6. The port is checked the same way, so one that anything on this
    machine listens on, on any address, is busy here (and not a crash of rank 0 later).
    """
    if requested is not None and not 1 <= requested <= 65535:
        raise UsageError(f"--port: {requested} is not a valid TCP port (1-65535)")
    what = f"port {requested}" if requested else "a free port"
    for family, everywhere in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the store's own socket
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                sock.bind((everywhere, requested or 0))
                return sock.getsockname()[1]
        except OSError as exc:
            if family == socket.AF_INET6 and exc.errno != errno.EADDRINUSE:
                continue  # no IPv6 here: the store listens on 0.0.0.0
            raise UsageError(
                f"cannot bind {what} on every address (torchrun's rendezvous store listens on all of them, "
                f"not only on {host}): {exc.strerror or exc}"
            ) from None
    raise AssertionError("unreachable: the IPv4 attempt returns or raises")


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
    # A cache.py or torch.py in the user's directory must not shadow ours: Python 3.11+
    # leaves the current directory off sys.path, and torchrun starts in the run directory.
    env["PYTHONSAFEPATH"] = "1"
    # Ranks import the project from wherever this interpreter found it.
    project_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (project_root, env.get("PYTHONPATH")) if p)
    return env


class GuardedView:
    """Calls the view's tick; if its output goes away (a closed pipe, a full disk) the run
    goes on without it: measuring matters more than showing."""

    def __init__(self, on_tick: Callable[[dict[int, list[Sample]], float], None]) -> None:
        self.on_tick: Callable[[dict[int, list[Sample]], float], None] | None = on_tick
        self.error: OSError | None = None

    def __call__(self, samples: dict[int, list[Sample]], elapsed: float) -> None:
        if self.on_tick is None:
            return
        try:
            self.on_tick(samples, elapsed)
        except OSError as exc:
            self.on_tick, self.error = None, exc


EarlyStop = Callable[[dict[int, list[Sample]]], str | None]


def launch(
    config: LaunchConfig,
    on_tick: Callable[[dict[int, list[Sample]], float], None],
    early_stop: EarlyStop | None = None,
) -> LaunchResult:
    """Run torchrun to completion; call `on_tick(samples_by_rank, elapsed)` while it runs.

    `early_stop(samples)` may return a reason to end the run before its duration: every
    rank is then asked (SIGUSR2) to stop as at its deadline, and the run completes.
    Whatever happens here (the end, the watchdog, the hard deadline, a stop signal, torchrun
    killed under the ranks, an error of our own), no rank outlives this function.
    """
    started = time.monotonic()
    interrupted, reason, stalls, stopped_early = False, None, [], None
    proc: subprocess.Popen[bytes] | None = None
    ranks = RankProcesses(config.node_rank)
    follower, view = RunFollower(config.run_dir), GuardedView(on_tick)
    link = None
    try:
        port = pick_port(config.host, config.port) if config.nodes is None else config.nodes.rdzv_port
        link = open_link(config)
        proc = _start_torchrun(config, port)
        reason, stalls, stopped_early = _supervise(proc, config, follower, view, started, early_stop, link, ranks)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP (lifecycle.StopRequests)
        interrupted, reason = True, f"interrupted by {STOPS.signal or 'SIGINT'}"
    except BaseException:
        if proc is not None:
            stop_process_group(proc, ranks)
        raise
    with STOPS.finishing():  # from here on a signal is noted, never cuts the stop short
        if reason is not None:
            if isinstance(link, Head):
                link.stop(reason)
            if proc is not None:
                stop_process_group(proc, ranks)
        elif proc is not None:
            # torchrun is gone; its ranks must be too (killed under them, it leaves them running)
            ranks.refresh(follower.poll())
            ranks.end(config.target.stop_grace_s + 2.0)
        result = _finish_link(link, config) if link is not None else {}
        view(follower.poll(), time.monotonic() - started)  # the final lines, once more
    code = proc.returncode if proc is not None and reason is None else None
    wall = time.monotonic() - started
    return LaunchResult(
        code,
        interrupted,
        reason is not None,
        reason,
        wall,
        tuple(stalls),
        stopped_early,
        **result,
        interrupted_by=STOPS.signal or "SIGINT" if interrupted else None,
        followed=follower.run,
    )


def _start_torchrun(config: LaunchConfig, port: int) -> subprocess.Popen[bytes]:
    with (config.run_dir / TORCHRUN_LOG).open("ab") as log:
        return subprocess.Popen(
            torchrun_command(config, port),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=rank_environment(config.host, config.nodes),
            cwd=config.run_dir.resolve(),  # never the user's directory: see rank_environment
            start_new_session=True,  # Ctrl-C reaches us, not the ranks; we stop them
            preexec_fn=parent_death_signal(),  # SIGKILLed, we take torchrun with us
        )


class RankProcesses:
    """This node's rank processes, remembered as psutil handles while torchrun is their
    parent: after torchrun is killed they are orphans that nothing else would find."""

    def __init__(self, node: int) -> None:
        self.node = node
        self.known: dict[int, psutil.Process] = {}

    def add_children(self, proc: subprocess.Popen[bytes]) -> None:
        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            self.known.setdefault(child.pid, child)

    def refresh(self, samples: dict[int, list[Sample]]) -> None:
        """Ranks that sampled, by the pid in their samples (those on this node only)."""
        for series in samples.values():
            if series and series[-1].node == self.node and series[-1].pid not in self.known:
                with contextlib.suppress(psutil.Error):
                    self.known[series[-1].pid] = psutil.Process(series[-1].pid)

    def end(self, grace_s: float, term_grace_s: float = 2.0) -> None:
        """Give the ranks `grace_s` to leave on their own, then SIGTERM, then SIGKILL."""
        procs = [p for p in self.known.values() if _running(p)]
        _, alive = psutil.wait_procs(procs, timeout=grace_s) if procs else ([], [])
        for signo, wait_s in ((signal.SIGTERM, term_grace_s), (signal.SIGKILL, 2.0)):
            for leftover in alive:
                with contextlib.suppress(psutil.Error):
                    leftover.send_signal(signo)
            _, alive = psutil.wait_procs(alive, timeout=wait_s) if alive else ([], [])


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def open_link(config: LaunchConfig) -> Head | Feeder | None:
    """Across nodes: node 0 hosts the sample store before its ranks start; the others connect."""
    if config.nodes is None:
        return None
    text = json.dumps(config.config.to_dict(), sort_keys=True)
    if config.nodes.is_head:
        return Head(config.nodes, text, config.run_dir)
    return Feeder(config.nodes, text, config.run_dir, config.startup_timeout_s)


def _finish_link(link: Head | Feeder | None, config: LaunchConfig) -> dict[str, Any]:
    """The other nodes' last word (node 0), or this node's last lines to node 0."""
    if isinstance(link, Head):
        link.finish(config.stop_grace_s)
        return {"lost_nodes": link.lost(), "remote_exits": link.exits()}
    if isinstance(link, Feeder):
        exits = worker_exits_in(config.run_dir)
        link.finish({r: (e.exit_code, e.signal) for r, e in exits.items()})
        return {"link_error": link.link_error}
    return {}


def _supervise(
    proc: subprocess.Popen[bytes],
    config: LaunchConfig,
    follower: RunFollower,
    view: GuardedView,
    started: float,
    early_stop: EarlyStop | None,
    link: Head | Feeder | None = None,
    ranks: RankProcesses | None = None,
) -> tuple[str | None, list[Stall], str | None]:
    """Follow the run until torchrun exits. Returns why the launcher must stop it (if it
    must), what the watchdog found, and why the run was ended early (if it was)."""
    hard_deadline = started + config.startup_timeout_s + config.duration_s + config.stop_grace_s
    hang_after_s = max(3.0, 20.0 / config.config.probe_hz)
    all_started = False
    stopped_early = None
    while proc.poll() is None:
        if link is not None and (stop := link.pump()) is not None:
            return stop, [], stopped_early
        samples = follower.poll()
        now = time.monotonic()
        view(samples, now - started)
        if ranks is not None and not all_started:
            ranks.add_children(proc)
            ranks.refresh(samples)
        if not all_started and len(samples) == config.expected_ranks and all(samples.values()):
            all_started = True  # every rank's workload has begun, give or take a poll
            hard_deadline = min(hard_deadline, now + config.duration_s + config.stop_grace_s)
        stalls = find_stalls(samples, time.time(), config.config.stall_timeout_s, hang_after_s)
        if stalls:
            request_stacks([s for s in stalls if _on_node(samples, s.rank, config.node_rank)])
            return "watchdog: " + "; ".join(s.message for s in stalls), stalls, stopped_early
        if now >= hard_deadline:
            if all_started:
                return f"ranks still running {config.stop_grace_s:.0f} s after the duration", [], stopped_early
            return f"not every rank started within {config.startup_timeout_s:.0f} s", [], stopped_early
        if early_stop is not None and all_started and stopped_early is None:
            stopped_early = early_stop(samples)
            if stopped_early is not None:
                _signal_ranks(samples, EARLY_STOP, config.node_rank)
                hard_deadline = min(hard_deadline, now + config.stop_grace_s)
        time.sleep(config.poll_interval_s)
    return None, [], stopped_early


def _on_node(samples: dict[int, list[Sample]], rank: int, node: int) -> bool:
    """Whether a rank runs on this node: only those may be signalled (a pid means nothing elsewhere)."""
    series = samples.get(rank)
    return bool(series) and series[-1].node == node


def _signal_ranks(samples: dict[int, list[Sample]], signo: int, node: int = 0) -> None:
    for rank, series in samples.items():
        if _on_node(samples, rank, node):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(series[0].pid, signo)


def request_stacks(stalls: list[Stall], settle_s: float = 0.5) -> None:
    """SIGUSR1 each stuck rank: faulthandler in it dumps every thread's stack to a file."""
    for stall in stalls:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(stall.pid, STACKS)
    time.sleep(settle_s)


def stop_process_group(
    proc: subprocess.Popen[bytes], ranks: RankProcesses | None = None, term_grace_s: float = 3.0
) -> None:
    """Stop torchrun and every rank: SIGTERM first (ranks write a final line), then SIGKILL.

    torchrun starts each rank in a session of its own, so signalling torchrun's group
    does not reach them: the ranks are found as its children (and in `ranks`, which
    remembers them should torchrun already be gone) and ended directly.
    """
    ranks = ranks or RankProcesses(0)
    ranks.add_children(proc)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)  # torchrun forwards it to the ranks
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=term_grace_s)
    ranks.end(0.5, term_grace_s=0.0)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5.0)
