"""The wire between nodes' hicaches: frames, the run secret, and its proof on every frame.

A frame is a 4-byte big-endian length and that many bytes. A connection opens with one
frame each way, MAGIC and a fresh random nonce (node 0's first). Both sides then derive a
session key, HMAC-SHA256(run secret, MAGIC + node 0's nonce + the other's nonce), and every
later frame is HMAC-SHA256(session key, sender + sequence number + body) followed by the
body, a JSON object. A frame from anyone without the secret fails its check, and so does
a frame replayed from another connection or out of order: each side drops it and closes.
Nothing is read as JSON before its proof is checked. The frames are not encrypted: the
secret keeps others out, it does not hide what the nodes say.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
import stat
import time
from pathlib import Path
from typing import Any

from hicache_cli.errors import UsageError
from hicache_cli.protocol import SECRET_ENV

MIN_SECRET_CHARS = 16
MAGIC = b"hicache-link/1"
NONCE_BYTES = 16
MAC_BYTES = 32
MAX_FRAME = 32 << 20  # a node's lines for half a second are kilobytes; stack dumps, megabytes at most
REFUSED_PROOF = b"unproven"  # node 0's last frame to a client whose first message failed its check


class Dropped(ValueError):
    """A frame or message that fails a check; `reason` is what node 0 counts it under."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


NOT_THE_PROTOCOL = "connections that did not speak hicache's link"
UNPROVEN = "messages without the run secret's proof"
NOT_A_MESSAGE = "messages not of their schema"


def send_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(len(payload).to_bytes(4, "big") + payload)


def receive_frame(sock: socket.socket, limit: int = MAX_FRAME) -> bytes:
    """One frame's payload; ConnectionError at the end of the stream, Dropped if over `limit`."""
    size = int.from_bytes(_receive_exactly(sock, 4), "big")
    if size > limit:
        raise Dropped(NOT_THE_PROTOCOL, f"a frame of {size} bytes")
    return _receive_exactly(sock, size)


def _receive_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the other side closed the link")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def connect_until(host: str, port: int, timeout_s: float) -> socket.socket:
    """Connect to node 0, trying again while it is not listening yet (the nodes start in any order)."""
    until = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection((host, port), timeout=max(0.5, min(5.0, timeout_s)))
        except OSError:
            if time.monotonic() >= until:
                raise
        time.sleep(0.2)


class Channel:
    """One authenticated connection: JSON objects out and in, each with its proof."""

    def __init__(self, sock: socket.socket, key: bytes, sends_as: bytes, receives_from: bytes) -> None:
        self.sock, self._key = sock, key
        self._sends_as, self._receives_from = sends_as, receives_from
        self._sent = self._received = 0

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message, separators=(",", ":")).encode()
        send_frame(self.sock, self._mac(self._sends_as, self._sent, body) + body)
        self._sent += 1

    def receive(self, limit: int = MAX_FRAME) -> dict[str, Any]:
        payload = receive_frame(self.sock, limit + MAC_BYTES)
        mac, body = payload[:MAC_BYTES], payload[MAC_BYTES:]
        if not hmac.compare_digest(mac, self._mac(self._receives_from, self._received, body)):
            raise Dropped(UNPROVEN, "the run secret's check failed")
        self._received += 1
        try:
            message = json.loads(body, parse_constant=reject_constant)
        except (ValueError, RecursionError) as exc:
            raise Dropped(NOT_A_MESSAGE, f"not JSON ({exc})") from None
        if not isinstance(message, dict):
            raise Dropped(NOT_A_MESSAGE, "not a JSON object")
        return message

    def close(self) -> None:
        self.sock.close()

    def _mac(self, sender: bytes, sequence: int, body: bytes) -> bytes:
        return hmac.new(self._key, sender + sequence.to_bytes(8, "big") + body, hashlib.sha256).digest()


def server_handshake(sock: socket.socket, secret: str) -> Channel:
    """Node 0's side: its nonce out, the client's in."""
    ours = secrets.token_bytes(NONCE_BYTES)
    send_frame(sock, MAGIC + ours)
    theirs = _nonce(receive_frame(sock, len(MAGIC) + NONCE_BYTES))
    return Channel(sock, session_key(secret, ours, theirs), b"H", b"F")


def client_handshake(sock: socket.socket, secret: str) -> Channel:
    """Another node's side: node 0's nonce in, its own out."""
    theirs = _nonce(receive_frame(sock, len(MAGIC) + NONCE_BYTES))
    ours = secrets.token_bytes(NONCE_BYTES)
    send_frame(sock, MAGIC + ours)
    return Channel(sock, session_key(secret, theirs, ours), b"F", b"H")


def session_key(secret: str, head_nonce: bytes, node_nonce: bytes) -> bytes:
    return hmac.new(secret.encode(), MAGIC + head_nonce + node_nonce, hashlib.sha256).digest()


def _nonce(payload: bytes) -> bytes:
    if len(payload) != len(MAGIC) + NONCE_BYTES or not payload.startswith(MAGIC):
        raise Dropped(NOT_THE_PROTOCOL, "no hicache link greeting")
    return payload[len(MAGIC) :]


def reject_constant(name: str) -> float:
    """json.loads reads NaN and Infinity by default; no message of ours has them."""
    raise ValueError(f"{name} is not a number JSON allows")


# --- the run secret ------------------------------------------------------------------------


def check_secret(secret: str) -> None:
    if len(secret) < MIN_SECRET_CHARS:
        raise UsageError(
            f"--run-secret ({SECRET_ENV}): at least {MIN_SECRET_CHARS} characters; "
            "for example: python -c 'import secrets; print(secrets.token_hex(16))'"
        )


def local_secret_file(run_id: str, port: int) -> Path:
    """Where node 0 leaves a generated secret for the other "nodes" of a run on this machine:
    a directory only this user can read, in $XDG_RUNTIME_DIR (else ~/.cache)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or str(Path.home() / ".cache")
    return Path(base) / "hicache-run-secrets" / f"run-{run_id}-{port}.secret"


def share_local_secret(path: Path) -> str:
    """Make a secret and write it where this user's other hicache processes find it."""
    _private_directory(path.parent)
    secret = secrets.token_hex(32)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(secret)
    os.replace(tmp, path)
    return secret


def read_local_secret(path: Path, timeout_s: float) -> str:
    """The secret node 0 left on this machine; waits up to `timeout_s` for it."""
    until = time.monotonic() + timeout_s
    while True:
        try:
            _private_directory(path.parent)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, encoding="ascii") as fh:
                if os.fstat(fh.fileno()).st_uid == os.getuid():
                    return fh.read().strip()
        except FileNotFoundError:
            pass
        if time.monotonic() >= until:
            raise UsageError(
                f"node 0's run secret is not in {path}: node 0 runs as another user, or on another "
                f"machine; give every node the same --run-secret ({SECRET_ENV})"
            )
        time.sleep(0.2)


def _private_directory(path: Path) -> None:
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.stat(path, follow_symlinks=False)
    except OSError as exc:
        raise UsageError(f"cannot keep the run secret in {path}: {exc.strerror or exc}; give --run-secret") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise UsageError(f"{path} is not a directory only this user can read; give --run-secret ({SECRET_ENV})")
