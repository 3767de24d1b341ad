"""Several nodes: torchrun's c10d rendezvous for the ranks, and a TCPStore for the samples.

Every node runs `hicache stress` with the same options and its own --node-rank. Each
node's hicache launches and supervises its local ranks, which write their samples to the
node's own run directory, as on one machine. Node 0 (the head) also hosts a
torch.distributed TCPStore; every other node's hicache (a feeder) follows its run
directory and pushes the new lines there, twice a second. The head writes them into its
own run directory, so its dashboard, watchdog and report see every rank. The same store
carries node 0's config (the others check theirs against it) and its stop request.

Nothing here is in the ranks: a link that drops costs the head its view of that node, not
the node its samples, which stay complete in its own run directory.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from hicache_cli.errors import UsageError
from hicache_cli.sample import LineTail, rank_file
from hicache_cli.watchdog import stack_file

NODE_ENV = "HICACHE_NODE_RANK"  # set for each rank: the --node-rank of the hicache that started it
HEARD_EVERY_S = 0.5  # a feeder pushes this often, lines or not: its heartbeat
LOST_AFTER_S = 5.0  # the head counts a node lost after this long without a word from it


@dataclass(frozen=True)
class NodeSpec:
    nnodes: int
    node_rank: int
    nproc_per_node: int
    rdzv_host: str
    rdzv_port: int
    rdzv_id: str
    sample_port: int

    @property
    def is_head(self) -> bool:
        return self.node_rank == 0

    @property
    def endpoint(self) -> str:
        return f"{self.rdzv_host}:{self.rdzv_port}"

    @property
    def loopback(self) -> bool:
        try:
            return ipaddress.ip_address(socket.gethostbyname(self.rdzv_host)).is_loopback
        except (OSError, ValueError):
            return False

    @property
    def prefix(self) -> str:
        return f"hicache/{self.rdzv_id}"


def node_spec(
    world_size: int,
    nnodes: int,
    node_rank: int | None,
    nproc_per_node: int | None,
    rdzv_endpoint: str | None,
    rdzv_id: str,
    sample_port: int | None,
) -> NodeSpec | None:
    """Check the multi-node options; None for the default single node on loopback."""
    if nnodes < 1:
        raise UsageError(f"--nnodes must be at least 1, got {nnodes}")
    if nnodes == 1:
        given = [
            name
            for name, value in (
                ("node-rank", node_rank),
                ("nproc-per-node", nproc_per_node),
                ("rdzv-endpoint", rdzv_endpoint),
                ("sample-port", sample_port),
            )
            if value is not None
        ]
        if given:
            raise UsageError(f"--{given[0]} is for runs across nodes; give --nnodes too")
        return None
    if node_rank is None or not 0 <= node_rank < nnodes:
        raise UsageError(f"--node-rank: give this node's index, 0 to {nnodes - 1} (0 shows the dashboard)")
    if rdzv_endpoint is None:
        raise UsageError("--rdzv-endpoint HOST:PORT is needed with --nnodes (node 0's address, reachable by all)")
    host, _, port_text = rdzv_endpoint.rpartition(":")
    if not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise UsageError(f"--rdzv-endpoint: {rdzv_endpoint!r} is not HOST:PORT")
    port = int(port_text)
    per_node = nproc_per_node if nproc_per_node is not None else world_size // nnodes
    if per_node < 1 or per_node * nnodes != world_size:
        raise UsageError(f"--nproc-per-node {per_node} x --nnodes {nnodes} must equal pp x tp = {world_size} ranks")
    samples = sample_port if sample_port is not None else port + 1
    if not 1 <= samples <= 65535 or samples == port:
        raise UsageError(f"--sample-port: {samples} must be a TCP port other than the rendezvous port")
    if not rdzv_id or "/" in rdzv_id:
        raise UsageError(f"--rdzv-id: {rdzv_id!r}; use a non-empty name without '/'")
    return NodeSpec(nnodes, node_rank, per_node, host, port, rdzv_id, samples)


@dataclass
class NodeState:
    host: str | None = None
    heard: float = 0.0  # time.monotonic() of its last message
    done: bool = False  # its torchrun exited and it sent its last lines
    exits: dict[int, tuple[int | None, str | None]] = field(default_factory=dict)  # rank -> (code, signal)


class Head:
    """Node 0: hosts the sample store, writes what the feeders push into the run directory."""

    def __init__(self, spec: NodeSpec, config_json: str, run_dir: Path) -> None:
        from torch.distributed import TCPStore  # only for runs across nodes: torch costs seconds

        self.spec, self.run_dir = spec, run_dir
        try:
            with _quiet_stderr():
                self.store = TCPStore(
                    spec.rdzv_host,
                    spec.sample_port,
                    is_master=True,
                    wait_for_workers=False,
                    timeout=timedelta(seconds=30),
                )
        except RuntimeError as exc:
            raise UsageError(f"cannot host the sample store on port {spec.sample_port}: {_first_line(exc)}") from None
        self.store.set(f"{spec.prefix}/config", config_json)
        self.nodes: dict[int, NodeState] = {}
        self.started = time.monotonic()

    def pump(self) -> str | None:
        """Take what the feeders pushed; write their lines to the rank files here."""
        key = f"{self.spec.prefix}/samples"
        for _ in range(self.store.queue_len(key)):
            self._take(json.loads(self.store.queue_pop(key, False)))
        return None

    def _take(self, message: dict[str, Any]) -> None:
        state = self.nodes.setdefault(int(message["node"]), NodeState())
        state.host, state.heard = message.get("host"), time.monotonic()
        for rank, lines in message.get("ranks", {}).items():
            if lines:
                with rank_file(self.run_dir, int(rank)).open("a", encoding="utf-8") as fh:
                    fh.write("".join(line + "\n" for line in lines))
        for rank, dump in message.get("stacks", {}).items():
            stack_file(self.run_dir, int(rank)).write_text(dump, encoding="utf-8")
        if message.get("done"):
            state.done = True
            state.exits.update({int(r): (c, s) for r, (c, s) in message.get("exits", {}).items()})

    def stop(self, reason: str) -> None:
        """Ask every feeder to stop its ranks: node 0 ended the run."""
        self.store.set(f"{self.spec.prefix}/stop", reason)

    def finish(self, grace_s: float) -> None:
        """After the local ranks ended: wait for every other node's last lines, or its loss."""
        until = time.monotonic() + grace_s
        while True:
            self.pump()
            pending = [k for k in range(1, self.spec.nnodes) if not self.nodes.get(k, NodeState()).done]
            if not pending or set(pending) <= set(self.silent_nodes()) or time.monotonic() >= until:
                return
            time.sleep(0.1)

    def silent_nodes(self, after_s: float | None = None) -> list[int]:
        after_s = LOST_AFTER_S if after_s is None else after_s
        now = time.monotonic()
        return [
            k
            for k in range(1, self.spec.nnodes)
            if not self.nodes.get(k, NodeState()).done
            and now - (self.nodes[k].heard if k in self.nodes else self.started) > after_s
        ]

    def lost(self) -> dict[int, str]:
        """Nodes not heard from for LOST_AFTER_S that never said they were done: node -> why."""
        lost = {}
        for k in self.silent_nodes():
            state = self.nodes.get(k)
            if state is None:
                lost[k] = f"node {k} never reached node 0 (its hicache did not connect to the sample store)"
            else:
                silent = time.monotonic() - state.heard
                lost[k] = f"node {k} ({state.host}) lost: no word from its hicache for {silent:.1f} s"
        return lost

    def exits(self) -> dict[int, tuple[int | None, str | None]]:
        return {r: e for state in self.nodes.values() for r, e in state.exits.items()}


class Feeder:
    """Every other node: pushes its ranks' new sample lines to node 0, and takes its stop."""

    def __init__(self, spec: NodeSpec, config_json: str, run_dir: Path, connect_timeout_s: float) -> None:
        from torch.distributed import TCPStore

        self.spec, self.run_dir, self.tail = spec, run_dir, LineTail(run_dir)
        self.host = socket.gethostname()
        self.link_error: str | None = None
        self._last_push = 0.0
        try:
            with _quiet_stderr():  # c10d logs every retry, with C++ stack frames, while node 0 starts
                self.store = TCPStore(
                    spec.rdzv_host, spec.sample_port, is_master=False, timeout=timedelta(seconds=connect_timeout_s)
                )
                head_config = self.store.get(f"{spec.prefix}/config").decode()
        except RuntimeError as exc:  # DistNetworkError, DistStoreError
            raise UsageError(
                f"node 0's sample store at {spec.rdzv_host}:{spec.sample_port} is not reachable: {_first_line(exc)}"
            ) from None
        differs = _differences(json.loads(head_config), json.loads(config_json))
        if differs:
            raise UsageError(f"this node's options differ from node 0's: {differs}")

    def pump(self) -> str | None:
        """Push new lines (at least every HEARD_EVERY_S, as a heartbeat); return node 0's stop
        request, if it made one."""
        if self.link_error is not None:
            return None
        lines = self._new_lines()
        now = time.monotonic()
        if not lines and now - self._last_push < HEARD_EVERY_S:
            return None
        try:
            self._push({"node": self.spec.node_rank, "host": self.host, "ranks": lines})
            self._last_push = now
            stop_key = f"{self.spec.prefix}/stop"
            if self.store.check([stop_key]):
                return "node 0 ended the run: " + self.store.get(stop_key).decode()
        except RuntimeError as exc:
            self.link_error = f"lost the link to node 0: {_first_line(exc)}"
        return None

    def finish(self, exits: dict[int, tuple[int | None, str | None]]) -> None:
        """The local ranks ended: push the last lines and say so."""
        if self.link_error is not None:
            return
        lines = self._new_lines()
        stacks = {  # what this node's watchdog had its stuck ranks dump, for node 0's report
            path.name.split(".")[0].split("-")[1]: path.read_text(encoding="utf-8", errors="replace")
            for path in self.run_dir.glob("rank-*.stacks.txt")
            if path.stat().st_size
        }
        message = {"node": self.spec.node_rank, "host": self.host, "ranks": lines, "done": True, "exits": exits}
        message["stacks"] = stacks
        try:
            self._push(message)
        except RuntimeError as exc:
            self.link_error = f"lost the link to node 0: {_first_line(exc)}"

    def _new_lines(self) -> dict[int, list[str]]:
        return {r: [line.decode() for line in new] for r, new in self.tail.poll().items() if new}

    def _push(self, message: dict[str, Any]) -> None:
        self.store.queue_push(f"{self.spec.prefix}/samples", json.dumps(message, separators=(",", ":")))


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null for a while: torch's C++ logging writes there directly."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _differences(head: dict[str, Any], mine: dict[str, Any]) -> str:
    keys = sorted(k for k in set(head) | set(mine) if head.get(k) != mine.get(k))
    return ", ".join(f"{k} {mine.get(k)!r} here, {head.get(k)!r} on node 0" for k in keys)
