"""An outsider to a multi-node run: someone who reaches node 0's sample port without the run
secret, and tries what the old TCPStore let anyone do (read the config, forge a rank's
samples, stop the run, send a line that is not JSON). Each attempt returns what node 0
answered, so a test can check that it answered nothing useful."""

from __future__ import annotations

import contextlib
import socket

from hicache_cli.launch.node_messages import hello, push
from hicache_cli.launch.node_wire import client_handshake, receive_frame
from tests.conftest import build_sample

WRONG_SECRET = "not-the-run-secret-at-all"


def send_raw(host: str, port: int, data: bytes, timeout_s: float = 3.0) -> bytes:
    """Send bytes that are not the link's protocol; return whatever comes back before node 0 closes."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(data)
        # node 0 may have read enough to refuse and closed already: then there is nothing to shut
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        received = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(4096):
                received += chunk
        return received


def forge(host: str, port: int, node: int, rank: int, options: dict[str, object], timeout_s: float = 3.0) -> bytes:
    """Speak the protocol with a wrong secret: a hello as `node`, then a push of a 99 GB sample
    for `rank` and a claim to be done. Returns node 0's answer to the hello (raw)."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        channel = client_handshake(sock, WRONG_SECRET)
        channel.send(hello(node, "outsider", options))
        forged = build_sample(rank, 1.0, node=node, rss_bytes=99_000_000_000).to_json()
        with contextlib.suppress(OSError):  # node 0 may have closed already
            channel.send(push({rank: [forged, "this line is not JSON"]}, done=True, exits={rank: (0, None)}))
        return receive_frame(sock)
