"""Several nodes: torchrun's c10d rendezvous for the ranks, and node 0's link for the samples.

Every node runs `hicache stress` with the same options and its own --node-rank. Each
node's hicache launches and supervises its local ranks, which write their samples to the
node's own run directory, as on one machine. Node 0 (the head) also listens on the
rendezvous address (node_server); every other node's hicache (a feeder) connects, proves
it holds the run secret (node_wire), says hello with its options, then follows its run
directory and pushes the new lines there, twice a second. The head checks them
(node_messages) and writes them into its own run directory, so its dashboard, watchdog and
report see every rank. Its answers carry its stop request; a node whose options differ is
refused, and node 0 ends the run at once, saying why.

Nothing here is in the ranks: a link that drops costs the head its view of that node, not
the node its samples, which stay complete in its own run directory.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hicache_cli.config import RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.files import read_bytes, run_file
from hicache_cli.launch.node_messages import FOREIGN_LINES, hello, push
from hicache_cli.launch.node_server import Joined, LinkServer, Pushed, Refused, Rejected
from hicache_cli.launch.node_wire import (
    NOT_A_MESSAGE,
    SECRET_ENV,
    UNPROVEN,
    Channel,
    Dropped,
    check_secret,
    client_handshake,
    connect_until,
    local_secret_file,
    read_local_secret,
    share_local_secret,
)
from hicache_cli.protocol import LINK_FILE, STACKS_GLOB, samples_file, stacks_file
from hicache_cli.rundir import read_run_text, write_run_file
from hicache_cli.sample import LineTail

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
    run_secret: str | None = field(default=None, repr=False)  # None: on loopback, node 0 makes one

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


def ranks_per_node(world_size: int, nnodes: int, nproc_per_node: int | None) -> int:
    """The ranks one machine runs: --nproc-per-node, else pp x tp spread evenly over the nodes."""
    return nproc_per_node if nproc_per_node is not None else world_size // max(1, nnodes)


def node_spec(
    world_size: int,
    nnodes: int,
    node_rank: int | None,
    nproc_per_node: int | None,
    rdzv_endpoint: str | None,
    rdzv_id: str,
    sample_port: int | None,
    run_secret: str | None = None,
) -> NodeSpec | None:
    """Check the multi-node options; None for the default single node on loopback.

    A run secret given to a single-node run is ignored: it may come from the environment."""
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
    per_node = ranks_per_node(world_size, nnodes, nproc_per_node)
    if per_node < 1 or per_node * nnodes != world_size:
        raise UsageError(f"--nproc-per-node {per_node} x --nnodes {nnodes} must equal pp x tp = {world_size} ranks")
    samples = sample_port if sample_port is not None else port + 1
    if not 1 <= samples <= 65535 or samples == port:
        raise UsageError(f"--sample-port: {samples} must be a TCP port other than the rendezvous port")
    if not rdzv_id or "/" in rdzv_id:
        raise UsageError(f"--rdzv-id: {rdzv_id!r}; use a non-empty name without '/'")
    spec = NodeSpec(nnodes, node_rank, per_node, host, port, rdzv_id, samples, run_secret or None)
    if run_secret:
        check_secret(run_secret)
    elif not spec.loopback:
        raise UsageError(
            f"--run-secret (or {SECRET_ENV}) is needed across machines: the same secret on every node, "
            "for example: python -c 'import secrets; print(secrets.token_hex(16))'"
        )
    return spec


def link_options(spec: NodeSpec, config_json: str) -> dict[str, Any]:
    """What must be the same on every node: the run's config (its target's settings beside
    the run's, so that a difference names the setting), the node count and the run id."""
    config = json.loads(config_json)
    target = config.pop("target", None)
    flat = {**config, **target} if isinstance(target, dict) else config
    return {**flat, "nnodes": spec.nnodes, "rdzv_id": spec.rdzv_id}


@dataclass
class NodeState:
    host: str | None = None
    heard: float = 0.0  # time.monotonic() of its last message
    done: bool = False  # its torchrun exited and it sent its last lines
    exits: dict[int, tuple[int | None, str | None]] = field(default_factory=dict)  # rank -> (code, signal)


class Head:
    """Node 0: hosts the link, writes what the feeders push into the run directory."""

    def __init__(self, spec: NodeSpec, config_json: str, run_dir: Path) -> None:
        self.spec, self.run_dir = spec, run_dir
        world_size = RunConfig.from_dict(json.loads(config_json)).expected_ranks or 0
        options = link_options(spec, config_json)
        secret, secret_file = spec.run_secret, None
        if secret is None:  # loopback: made here, written before the link listens (a node that connects finds it)
            secret_file = local_secret_file(spec.rdzv_id, spec.sample_port)
            secret = share_local_secret(secret_file)
        try:
            self.server = LinkServer(spec.rdzv_host, spec.sample_port, secret, options, world_size)
        except UsageError:
            _close(None, secret_file)
            raise
        self._closer = weakref.finalize(self, _close, self.server, secret_file)
        self.nodes: dict[int, NodeState] = {}
        self.refused: dict[int, str] = {}  # node -> why it would not start
        self.dropped: Counter[str] = Counter()  # what the link dropped, by reason
        self.owners: dict[int, int] = {}  # rank -> the node whose lines it took first
        self.started = time.monotonic()

    def pump(self) -> str | None:
        """Take what the feeders pushed; write their lines to the rank files here. Returns
        why the run cannot go on (a node refused to start), if it cannot."""
        for event in self.server.take():
            if isinstance(event, Pushed):
                self._take(event)
            elif isinstance(event, Joined):
                self._heard(event.node, event.host)
            elif isinstance(event, Refused):
                self.refused[event.node] = event.why
            elif isinstance(event, Rejected):
                self.dropped[event.reason] += 1
        return next((f"node {k} refused to start: {why}" for k, why in sorted(self.refused.items())), None)

    def _heard(self, node: int, host: str | None) -> NodeState:
        state = self.nodes.setdefault(node, NodeState())
        state.host, state.heard = host, time.monotonic()
        return state

    def _take(self, event: Pushed) -> None:
        state, pushed = self._heard(event.node, event.host), event.push
        self.dropped.update(pushed.dropped)
        for rank, lines in pushed.lines.items():
            if self.owners.setdefault(rank, event.node) != event.node:
                self.dropped[FOREIGN_LINES] += len(lines)
                continue
            with run_file(samples_file(self.run_dir, rank), "append") as fh:
                fh.write("".join(line + "\n" for line in lines))
        for rank, dump in pushed.stacks.items():
            if self.owners.setdefault(rank, event.node) == event.node:
                with run_file(stacks_file(self.run_dir, rank), "truncate") as fh:
                    fh.write(dump)
        if pushed.done:
            state.done = True
            state.exits.update({r: e for r, e in pushed.exits.items() if self.owners.get(r, event.node) == event.node})

    def stop(self, reason: str) -> None:
        """Ask every feeder to stop its ranks: node 0 ended the run (in its next answer to each)."""
        self.server.stop_reason = reason

    def finish(self, grace_s: float) -> None:
        """After the local ranks ended: wait for every other node's last lines, or its loss.
        Then note what the link refused and dropped in the run directory."""
        until = time.monotonic() + grace_s
        while True:
            self.pump()
            pending = [k for k in self._expected() if not self.nodes.get(k, NodeState()).done]
            if not pending or set(pending) <= set(self.silent_nodes()) or time.monotonic() >= until:
                break
            time.sleep(0.1)
        record = {"dropped": dict(self.dropped), "refused": {str(k): why for k, why in self.refused.items()}}
        write_run_file(self.run_dir / LINK_FILE, json.dumps(record, indent=2, sort_keys=True) + "\n")

    def silent_nodes(self, after_s: float | None = None) -> list[int]:
        after_s = LOST_AFTER_S if after_s is None else after_s
        now = time.monotonic()
        return [
            k
            for k in self._expected()
            if not self.nodes.get(k, NodeState()).done
            and now - (self.nodes[k].heard if k in self.nodes else self.started) > after_s
        ]

    def lost(self) -> dict[int, str]:
        """Nodes not heard from for LOST_AFTER_S that never said they were done: node -> why."""
        lost = {}
        for k in self.silent_nodes():
            state = self.nodes.get(k)
            if state is None:
                why = f"its hicache did not connect to the sample store{self._unproven()}"
                lost[k] = f"node {k} never reached node 0 ({why})"
            else:
                silent = time.monotonic() - state.heard
                lost[k] = f"node {k} ({state.host}) lost: no word from its hicache for {silent:.1f} s"
        return lost

    def exits(self) -> dict[int, tuple[int | None, str | None]]:
        return {r: e for state in self.nodes.values() for r, e in state.exits.items()}

    def _expected(self) -> list[int]:
        """The other nodes whose word the run waits for: all but those that refused."""
        return [k for k in range(1, self.spec.nnodes) if k not in self.refused]

    def _unproven(self) -> str:
        n = self.dropped[UNPROVEN]
        return f"; {n} {UNPROVEN} were refused: is the run secret the same on every node?" if n else ""


def link_summary(run_dir: Path) -> str | None:
    """What node 0's link dropped during the run (its LINK_FILE), in one line; None if nothing."""
    try:
        dropped = json.loads(read_bytes(run_dir / LINK_FILE, follow=False))["dropped"]
    except FileNotFoundError:
        return None
    counts = ", ".join(f"{n} {reason}" for reason, n in sorted(dropped.items()) if n)
    return f"node 0's link dropped {counts} (see {LINK_FILE})" if counts else None


def _close(server: LinkServer | None, secret_file: Path | None) -> None:
    if server is not None:
        server.close()
    if secret_file is not None:
        secret_file.unlink(missing_ok=True)


REPLY_S = LOST_AFTER_S  # node 0 answers at once; this long without an answer, the link is gone


class Feeder:
    """Every other node: pushes its ranks' new sample lines to node 0, and takes its stop."""

    def __init__(self, spec: NodeSpec, config_json: str, run_dir: Path, connect_timeout_s: float) -> None:
        self.spec, self.run_dir, self.tail = spec, run_dir, LineTail(run_dir)
        self.host = socket.gethostname()
        self.link_error: str | None = None
        self._last_push = 0.0
        self.channel = _connect(spec, connect_timeout_s)
        try:
            reply = self._ask(hello(spec.node_rank, self.host, link_options(spec, config_json)))
        except Dropped as exc:
            self.channel.close()
            if exc.reason == UNPROVEN:
                raise UsageError(
                    f"the link to node 0 failed the run secret's check: give every node the same "
                    f"--run-secret ({SECRET_ENV})"
                ) from None
            raise UsageError(f"node 0 answered out of turn: {exc}") from None
        except OSError as exc:
            self.channel.close()
            raise UsageError(f"node 0 closed the link before answering: {exc}") from None
        if reply.get("type") != "welcome":
            self.channel.close()
            raise UsageError(str(reply.get("why", "node 0 refused this node"))[:4096])

    def pump(self) -> str | None:
        """Push new lines (at least every HEARD_EVERY_S, as a heartbeat); return node 0's stop
        request, if it made one."""
        if self.link_error is not None:
            return None
        lines = self._new_lines()
        now = time.monotonic()
        if not lines and now - self._last_push < HEARD_EVERY_S:
            return None
        stop = self._push(push(lines))
        self._last_push = now
        return None if stop is None else f"node 0 ended the run: {stop}"

    def finish(self, exits: dict[int, tuple[int | None, str | None]]) -> None:
        """The local ranks ended: push the last lines, the exits and stack dumps, and say so."""
        if self.link_error is not None:
            return
        stacks = {}  # what this node's watchdog had its stuck ranks dump, for node 0's report
        for path in self.run_dir.glob(STACKS_GLOB):
            if (rank := path.name.removeprefix("rank-").split(".")[0]).isdigit():
                with contextlib.suppress(OSError):  # gone, or not a file hicache wrote: no dump
                    if dump := read_run_text(path):
                        stacks[int(rank)] = dump
        self._push(push(self._new_lines(), done=True, exits=exits, stacks=stacks))
        self.channel.close()

    def _new_lines(self) -> dict[int, list[str]]:
        return {r: [line.decode(errors="replace") for line in new] for r, new in self.tail.poll().items() if new}

    def _push(self, message: dict[str, Any]) -> str | None:
        """Send; return node 0's stop request from its answer. A link that fails is noted, not raised."""
        try:
            reply = self._ask(message)
            stop = reply.get("stop")
            if reply.get("type") != "ack" or not (stop is None or isinstance(stop, str)):
                raise Dropped(NOT_A_MESSAGE, "node 0's answer is not an ack")
        except (OSError, Dropped) as exc:
            self.link_error = f"lost the link to node 0: {exc}"
            self.channel.close()
            return None
        return stop

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.channel.send(message)
        return self.channel.receive()


def _connect(spec: NodeSpec, timeout_s: float) -> Channel:
    where = f"{spec.rdzv_host}:{spec.sample_port}"
    try:
        sock = connect_until(spec.rdzv_host, spec.sample_port, timeout_s)
    except OSError as exc:
        raise UsageError(f"node 0's sample store at {where} is not reachable: {exc.strerror or exc}") from None
    try:  # a loopback run's secret is where node 0 left it, before it listened: there by now, or never
        secret = spec.run_secret or read_local_secret(local_secret_file(spec.rdzv_id, spec.sample_port), 2.0)
        sock.settimeout(REPLY_S)
        return client_handshake(sock, secret)
    except (OSError, Dropped) as exc:
        sock.close()
        raise UsageError(f"node 0's sample store at {where} did not greet this node: {exc}") from None
    except UsageError:
        sock.close()
        raise
