"""node_wire: frames, the handshake, the proof on every frame, and the run secret's file.
Both ends run in this process over a socketpair."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hicache_cli.errors import UsageError
from hicache_cli.launch.node_wire import (
    MAX_FRAME,
    NOT_A_MESSAGE,
    NOT_THE_PROTOCOL,
    UNPROVEN,
    Channel,
    Dropped,
    check_secret,
    client_handshake,
    read_local_secret,
    receive_frame,
    send_frame,
    server_handshake,
    share_local_secret,
)

SECRET = "the-run-secret-0123"


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    head, node = socket.socketpair()
    head.settimeout(5.0)
    node.settimeout(5.0)
    yield head, node
    head.close()
    node.close()


def shake(pair: tuple[socket.socket, socket.socket], node_secret: str = SECRET) -> tuple[Channel, Channel]:
    """Both handshakes at once (each waits for the other's nonce): node 0's end, the node's end."""
    ends: dict[str, Channel] = {}
    thread = threading.Thread(target=lambda: ends.setdefault("head", server_handshake(pair[0], SECRET)))
    thread.start()
    ends["node"] = client_handshake(pair[1], node_secret)
    thread.join()
    return ends["head"], ends["node"]


def test_messages_go_both_ways_with_their_proof(pair: tuple[socket.socket, socket.socket]) -> None:
    head, node = shake(pair)
    node.send({"type": "push", "ranks": {}})
    assert head.receive() == {"type": "push", "ranks": {}}
    head.send({"type": "ack", "stop": None})
    assert node.receive() == {"type": "ack", "stop": None}


def test_a_wrong_secret_fails_the_check(pair: tuple[socket.socket, socket.socket]) -> None:
    head, node = shake(pair, node_secret="another-secret-0123")
    node.send({"type": "hello"})
    with pytest.raises(Dropped) as caught:
        head.receive()
    assert caught.value.reason == UNPROVEN


def test_a_replayed_frame_fails_the_check(pair: tuple[socket.socket, socket.socket]) -> None:
    head, node = shake(pair)
    node.send({"type": "push", "ranks": {}})
    frame = receive_frame(pair[0])  # taken off the wire before node 0 reads it...
    send_frame(pair[1], frame)  # ...and put back twice
    send_frame(pair[1], frame)
    assert head.receive() == {"type": "push", "ranks": {}}
    with pytest.raises(Dropped) as caught:
        head.receive()  # its sequence number is spent
    assert caught.value.reason == UNPROVEN


def test_a_frame_sent_back_to_its_sender_fails_the_check(pair: tuple[socket.socket, socket.socket]) -> None:
    """node 0's proof is not the other nodes': a stranger cannot reflect node 0's own frames."""
    head, node = shake(pair)
    head.send({"type": "ack", "stop": None})
    payload = receive_frame(pair[1])
    send_frame(pair[1], payload)
    with pytest.raises(Dropped) as caught:
        head.receive()
    assert caught.value.reason == UNPROVEN


def test_a_proven_body_that_is_not_a_json_object_is_not_a_message(pair: tuple[socket.socket, socket.socket]) -> None:
    head, node = shake(pair)
    for body in (b"not json", b"[1, 2]", b'{"t": NaN}'):
        # what only a holder of the secret could send: the node's own proof on a bad body
        send_frame(pair[1], node._mac(b"F", node._sent, body) + body)
        node._sent += 1
        with pytest.raises(Dropped) as caught:
            head.receive()
        assert caught.value.reason == NOT_A_MESSAGE


def test_an_oversized_frame_is_not_read(pair: tuple[socket.socket, socket.socket]) -> None:
    pair[1].sendall((MAX_FRAME + 1).to_bytes(4, "big"))
    with pytest.raises(Dropped) as caught:
        receive_frame(pair[0])
    assert caught.value.reason == NOT_THE_PROTOCOL


def test_a_greeting_that_is_not_hicaches_is_refused(pair: tuple[socket.socket, socket.socket]) -> None:
    send_frame(pair[1], b"GET / HTTP/1.1\r\n\r\n")
    with pytest.raises(Dropped) as caught:
        server_handshake(pair[0], SECRET)
    assert caught.value.reason == NOT_THE_PROTOCOL


def test_a_closed_link_is_a_connection_error(pair: tuple[socket.socket, socket.socket]) -> None:
    pair[1].sendall(b"\x00\x00")
    pair[1].close()
    with pytest.raises(ConnectionError):
        receive_frame(pair[0])


@pytest.mark.parametrize("secret", ["", "short", "x" * 15])
def test_a_secret_under_16_characters_is_refused(secret: str) -> None:
    with pytest.raises(UsageError, match="at least 16 characters"):
        check_secret(secret)


def test_a_shared_secret_is_read_back_by_this_user(tmp_path: Path) -> None:
    path = tmp_path / "secrets" / "run-x-1.secret"
    made = share_local_secret(path)
    assert len(made) == 64
    assert read_local_secret(path, 0.0) == made
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_secret_in_a_directory_others_can_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "secrets" / "run-x-1.secret"
    share_local_secret(path)
    os.chmod(path.parent, 0o755)
    with pytest.raises(UsageError, match="is not a directory only this user can read; give --run-secret"):
        read_local_secret(path, 0.0)
    with pytest.raises(UsageError, match="is not a directory only this user can read"):
        share_local_secret(path)


def test_a_missing_secret_is_waited_for_then_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="node 0's run secret is not in .*give every node the same --run-secret"):
        read_local_secret(tmp_path / "secrets" / "run-x-1.secret", 0.3)
