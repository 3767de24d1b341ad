"""Node 0's end of the link: a small TCP server on the rendezvous address, a thread per
connection. Its threads check every frame and message and answer at once; what they
learn reaches the head as events, which it takes on its own thread (Head.pump).

Why not torch's TCPStore, which it replaces: the store takes any client's keys and queue
pops, so anyone who reaches the port can read the config, forge or steal samples and stop
the run, and a check on each message could not keep a stranger from popping the queue.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
from dataclasses import dataclass
from typing import Any

from hicache_cli.errors import UsageError
from hicache_cli.launch.node_messages import Push, check_hello, check_push, describe, differences
from hicache_cli.launch.node_wire import (
    NOT_A_MESSAGE,
    NOT_THE_PROTOCOL,
    REFUSED_PROOF,
    UNPROVEN,
    Channel,
    Dropped,
    send_frame,
    server_handshake,
)

HANDSHAKE_S = 5.0  # a connection must prove itself this fast
MAX_UNPROVEN = 16  # connections at once not yet past their hello: more are closed at once
MAX_HELLO = 1 << 20  # a hello is read before its proof is known: a run config, kilobytes
IDLE_S = 30.0  # a node pushes every half second; one silent for this long is gone
TOO_MANY = "connections over the limit"
TWICE = "hellos from a node already connected"


@dataclass(frozen=True)
class Joined:
    node: int
    host: str | None


@dataclass(frozen=True)
class Refused:
    """A node whose options differ: it will not start, so neither can the run."""

    node: int
    why: str  # in node 0's words


@dataclass(frozen=True)
class Pushed:
    node: int
    host: str | None
    push: Push


@dataclass(frozen=True)
class Rejected:
    reason: str  # what it is counted under
    peer: str


Event = Joined | Refused | Pushed | Rejected


class LinkServer:
    def __init__(self, host: str, port: int, secret: str, options: dict[str, Any], world_size: int) -> None:
        self.secret, self.options, self.world_size = secret, options, world_size
        self.nnodes = int(options["nnodes"])
        self.events: queue.Queue[Event] = queue.Queue()
        self.stop_reason: str | None = None  # set by the head; every later ack carries it
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._unproven = 0  # connections not yet past their hello
        self._joined: dict[int, str] = {}  # node -> where it connected from
        self._closing = threading.Event()
        self._listener = _listen(host, port)
        self.address = self._listener.getsockname()
        self._thread = threading.Thread(target=self._accept, name="hicache-link", daemon=True)
        self._thread.start()

    def take(self) -> list[Event]:
        taken = []
        with contextlib.suppress(queue.Empty):
            while True:
                taken.append(self.events.get_nowait())
        return taken

    def close(self) -> None:
        self._closing.set()
        self._listener.close()
        with self._lock:
            for sock in self._open:
                _shut(sock)
        self._thread.join(timeout=2.0)

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                sock, peer = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            with self._lock:
                crowded = self._unproven >= MAX_UNPROVEN
                if not crowded:
                    self._unproven += 1
                    self._open.add(sock)
            if crowded:  # strangers holding connections open cannot crowd out a node that has joined
                sock.close()
                self.events.put(Rejected(TOO_MANY, peer[0]))
                continue
            threading.Thread(
                target=self._serve, args=(sock, peer[0]), name=f"hicache-link-{peer[0]}", daemon=True
            ).start()

    def _serve(self, sock: socket.socket, peer: str) -> None:
        node = None
        # the greeting and the hello within HANDSHAKE_S in all, however slowly they trickle in
        deadline = threading.Timer(HANDSHAKE_S, _shut, (sock,))
        deadline.start()
        try:
            sock.settimeout(HANDSHAKE_S)
            channel = server_handshake(sock, self.secret)
            try:
                hello = check_hello(channel.receive(MAX_HELLO), self.nnodes)
            except Dropped as exc:
                if exc.reason != UNPROVEN:
                    raise
                # noted before the stranger is told: node 0 never knows of a refusal later than
                # the refused node does (a feeder with another secret, then node 0's pump)
                self.events.put(Rejected(UNPROVEN, peer))
                with contextlib.suppress(OSError):
                    send_frame(sock, REFUSED_PROOF)
                return
            if (why := self._admit(hello.node, hello.options, peer)) is not None:
                channel.send({"type": "refused", "why": why})
                return
            node = hello.node
            deadline.cancel()
            with self._lock:
                self._unproven -= 1
            channel.send({"type": "welcome"})
            self.events.put(Joined(node, hello.host))
            sock.settimeout(IDLE_S)
            while True:
                self._take_push(channel, node, hello.host, peer)
        except Dropped as exc:
            self.events.put(Rejected(exc.reason, peer))
        except OSError:  # the link dropped or timed out: the head notices a node's silence
            if node is None and not self._closing.is_set():
                self.events.put(Rejected(NOT_THE_PROTOCOL, peer))
        finally:
            deadline.cancel()
            with self._lock:
                self._open.discard(sock)
                if node is None:
                    self._unproven -= 1
                else:
                    self._joined.pop(node, None)
            sock.close()

    def _take_push(self, channel: Channel, node: int, host: str | None, peer: str) -> None:
        """One push, answered. A proven message of the wrong shape is dropped, and the link
        stays: only frames without the proof end it (Dropped, raised by receive)."""
        try:
            body = channel.receive()
            self.events.put(Pushed(node, host, check_push(body, node, self.world_size)))
        except Dropped as exc:
            if exc.reason != NOT_A_MESSAGE:
                raise
            self.events.put(Rejected(exc.reason, peer))
        channel.send({"type": "ack", "stop": self.stop_reason})

    def _admit(self, node: int, options: dict[str, Any], peer: str) -> str | None:
        """Why the node may not join (in its words), or None; tells the head of a refusal."""
        diffs = differences(self.options, options)
        if diffs:
            self.events.put(Refused(node, f"its options differ from node 0's: {describe(diffs, f'on node {node}')}"))
            return f"this node's options differ from node 0's: {describe(diffs, 'here')}"
        with self._lock:
            there = self._joined.get(node)
            if there is None:
                self._joined[node] = peer
                return None
        self.events.put(Rejected(TWICE, peer))
        return f"node {node} is already connected to node 0, from {there}: give each node its own --node-rank"


def _shut(sock: socket.socket) -> None:
    """Wake the thread blocked reading `sock`: its connection is over."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on `host`'s address only (the rendezvous address), never all interfaces."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        listener = socket.socket(family, kind, proto)
    except OSError as exc:
        raise UsageError(f"cannot host the sample store on {host}:{port}: {exc.strerror or exc}") from None
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(16)
    except OSError as exc:
        listener.close()
        raise UsageError(
            f"cannot host the sample store on {address[0]}:{port}: {exc.strerror or exc}"
            " (node 0 must hold the --rdzv-endpoint address, and --sample-port be free there)"
        ) from None
    listener.settimeout(0.2)  # the accept loop looks at _closing this often
    return listener
